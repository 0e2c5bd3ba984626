"""Import of the compiled core with an actionable message when it is missing."""

from __future__ import annotations

try:
    from behavioral_pq.core import _native as native  # noqa: F401
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "behavioral_pq's native core (_native) is not built or cannot find libLLVM-19. "
        "Install LLVM 19 (apt-get install llvm-19-dev) and reinstall the package (pip install .). "
        f"Original error: {exc}"
    ) from exc

LLVM_VERSION: str = native.LLVM_VERSION
LLVM_MAJOR: int = int(native.LLVM_VERSION_MAJOR)
