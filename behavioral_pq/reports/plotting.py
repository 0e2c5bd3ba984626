"""Figures shared by the reports and the CLI. matplotlib loads only when a figure is drawn (Agg back end)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from behavioral_pq.artifacts import atomic_path
from behavioral_pq.core.features import AUTOPHASE_FEATURES


def pyplot():
    """matplotlib.pyplot on the Agg back end (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, *, dpi: int = 110) -> Path:
    """Save ``fig`` to ``path`` atomically (the format follows the suffix) and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi)
    pyplot().close(fig)
    return Path(path)


def plot_spectrum(values: np.ndarray, path, title: str = "") -> Path:
    """Heatmap of a (P, 56) spectrum: probes down, Autophase features across, diverging around 0."""
    plt = pyplot()
    limit = float(np.nanmax(np.abs(values))) or 1.0
    fig, ax = plt.subplots(figsize=(14, 2.5 + values.shape[0] * 0.06))
    image = ax.imshow(values, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    ax.set_xticks(range(len(AUTOPHASE_FEATURES)))
    ax.set_xticklabels(AUTOPHASE_FEATURES, rotation=90, fontsize=7)
    ax.set_ylabel("probe")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.02, pad=0.01, label="log1p(h_opt) - log1p(h_orig)")
    fig.tight_layout()
    return save_figure(fig, path)
