"""Applying passes to modules."""

from __future__ import annotations

from typing import Optional, Sequence, Union

from behavioral_pq.core.catalog import PassLike, resolve_pipeline
from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.module import Module, ModuleLike, load_module
from behavioral_pq.core.target import TargetLike, resolve_target


def optimize(module: ModuleLike, passes: Union[str, Sequence[PassLike]], *,
             engine: Optional[Engine] = None, target: TargetLike = None) -> Module:
    """Apply a pass sequence to a module; returns a new Module (the input is unchanged).

    ``passes``: catalog flags or indices (``["-sroa", 57]``), a string of flags (``"-sroa -gvn"``), ``"Oz"`` /
    ``"O3"``, or a raw new-PM pipeline (``"function(sroa),globalopt"``). ``target``: None (the default) runs in
    measure mode, with no TargetMachine, as labels and spectra do; ``"host"``, a triple or a
    :class:`~behavioral_pq.core.target.Target` runs in target mode (code meant to run: the vectorizers see real
    registers; see :mod:`behavioral_pq.core.target`). Runs in a worker process: a pass that aborts raises
    PassCrashError, one that hangs PassTimeoutError.
    """
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    pipeline = resolve_pipeline(passes)
    bitcode = engine.run_pipeline(module.bitcode, pipeline, name=module.name, target=resolve_target(target))
    return Module(bitcode, name=module.name, source=module.source)
