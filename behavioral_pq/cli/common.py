"""What every command group shares: JSON printing, the ``--passes`` syntax and the passes epilog."""

from __future__ import annotations

import json

from behavioral_pq.core.catalog import resolve_pipeline

PASSES_EPILOG = """\
passes: catalog flags ("--passes='-sroa -gvn'" or "--passes=-sroa,-gvn"), catalog indices ("--passes 1,57"),
Oz / O3, or a raw LLVM new-PM pipeline ("--passes 'function(sroa),gvn'").
Environment: BPQ_WORKERS (worker processes), BPQ_TIMEOUT (seconds per pipeline run), BPQ_DEBUG=1 (tracebacks).
"""


def print_json(data) -> None:
    print(json.dumps(data, indent=1))


def parse_passes(text: str) -> str:
    """A ``--passes`` value as a new-PM pipeline: catalog indices ("1,57") or what ``resolve_pipeline`` takes."""
    parts = text.replace(",", " ").split()
    if parts and all(p.isdigit() for p in parts):
        return resolve_pipeline([int(p) for p in parts])
    return resolve_pipeline(text)
