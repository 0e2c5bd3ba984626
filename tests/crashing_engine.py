"""A deterministic stand-in for an LLVM bug: an engine that crashes on every pipeline holding one pass pair."""

from behavioral_pq.errors import PassCrashError


class CrashesOn:
    """An engine on which a pass crashes LLVM when it runs right after a given other pass (as a pass meeting an
    LLVM bug in one context would)."""

    def __init__(self, engine, pair: str):
        self.engine, self.pair = engine, pair

    def _crash(self, pipeline):
        return self.pair in pipeline

    def run_pipeline(self, bitcode, pipeline, name="module"):
        if self._crash(pipeline):
            raise PassCrashError(f"{name}: LLVM crashed", module=name, pipeline=pipeline)
        return self.engine.run_pipeline(bitcode, pipeline, name=name)

    def autophase_after(self, bitcodes, pipelines, names=None, progress=None):
        crashing = [i for i, p in enumerate(pipelines) if self._crash(p)]
        safe = [p if not self._crash(p) else "function(no-op-function)" for p in pipelines]
        features, errors = self.engine.autophase_after(bitcodes, safe, names=names)
        if crashing:
            features[:] = 0
            errors = [PassCrashError("LLVM crashed", module="m", pipeline_index=crashing[0]) for _ in bitcodes]
        return features, errors

    def autophase_tree(self, roots, parents, edges, wanted=None, keep=None, names=None, progress=None,
                       timeout_fails_root=False, deadline=None):
        safe = [p if not self._crash(p) else "function(no-op-function)" for p in edges]
        features, kept, errors = self.engine.autophase_tree(roots, parents, safe, wanted=wanted, keep=keep,
                                                            names=names, timeout_fails_root=timeout_fails_root,
                                                            deadline=deadline)
        for i, edge in enumerate(edges):
            if self._crash(edge):
                errors[i] = PassCrashError("LLVM crashed", module="m", pipeline=edge)
        return features, kept, errors
