"""Worker process of the engine: ``python -m behavioral_pq.core._worker PROGRESS_FILE THREADS``.

Reads length-prefixed requests on stdin and answers on the original stdout: pickled tuples, or a session step in a
fixed binary form answered by the native core (src/native/steps.h: an environment's step costs no pickling and no
Python). LLVM may abort the process (report_fatal_error, a signal): the parent sees the pipe close and turns that
into a typed error. File descriptor 1 is pointed at stderr so nothing LLVM prints can corrupt the protocol.
"""

from __future__ import annotations

import mmap
import os
import pickle
import struct
import sys

HEADER = struct.Struct("<Q")

#: Session step operations, sent by the parent (``native.StepChannel``) and answered by the worker
#: (``native.serve_steps``) in the fixed binary form that src/native/steps.h states (no pickling).
STEP_APPLY, STEP_OBSERVE = 1, 2


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Sessions:
    """Live modules by id (``native.LiveModule``): an environment's episode kept in memory between steps."""

    def __init__(self, native):
        self.native = native
        self.modules = {}
        self.next_id = 0

    def _add(self, module) -> int:
        self.next_id += 1
        self.modules[self.next_id] = module
        return self.next_id

    def _observe(self, module, wants):
        return module.observe(*wants)

    def handle(self, request, progress):
        """Session requests: ``open`` (bitcode, pipelines to replay) -> id; ``apply`` (id, pipeline, wants) ->
        (changed: the passes reported a change, instruction count, Autophase or None, InstCount or None);
        ``observe`` (id, wants) -> the same without ``changed``; ``bitcode`` (id) -> bytes as ``run_pipeline``
        writes them; ``fork`` (id) -> id of a copy re-parsed from bitcode with use-list order; ``close`` (ids)."""
        op = request[0]
        if op == "open":
            _, bitcode, pipelines = request
            module = self.native.LiveModule(bitcode)
            for pipeline in pipelines:
                module.apply(pipeline, progress)
            return self._add(module)
        if op == "apply":
            _, sid, pipeline, wants = request
            module = self.modules[sid]
            changed = module.apply(pipeline, progress)
            return (changed,) + self._observe(module, wants)
        if op == "observe":
            return self._observe(self.modules[request[1]], request[2])
        if op == "bitcode":
            return self.modules[request[1]].bitcode(False)
        if op == "fork":
            return self._add(self.native.LiveModule(self.modules[request[1]].bitcode(True)))
        if op == "close":
            for sid in request[1]:
                self.modules.pop(sid, None)
            return None
        raise ValueError(f"unknown session request {op!r}")


SESSION_OPS = ("open", "apply", "observe", "bitcode", "fork", "close")


def _handle(native, request, progress, sessions=None):
    op = request[0]
    if op in SESSION_OPS and sessions is not None:
        return sessions.handle(request, progress)
    if op == "prepare":
        return native.prepare(request[1], request[2])
    if op == "run":
        return native.run_pipeline(request[1], request[2], progress, *request[3:])
    if op == "after":
        _, bitcodes, pipelines, threads = request
        return native.autophase_after(bitcodes, pipelines, threads, progress)
    if op == "tree":
        _, roots, parents, edges, wanted, keep, threads = request
        return native.autophase_tree(roots, parents, edges, wanted, keep, threads, progress)
    raise ValueError(f"unknown request {op!r}")


def main(argv) -> int:
    progress_path, threads = argv[1], int(argv[2])
    out_fd = os.dup(1)
    os.dup2(2, 1)
    in_fd = sys.stdin.fileno()
    # Loaded only after fd 1 points at stderr, so nothing LLVM prints can corrupt the reply stream.
    from behavioral_pq.core import _native as native

    with open(progress_path, "r+b") as f:
        progress = mmap.mmap(f.fileno(), 24 * threads)
    sessions = Sessions(native)
    while True:
        payload = native.serve_steps(in_fd, out_fd, sessions.modules, progress)   # steps are answered natively
        if payload is None:
            return 0
        request = pickle.loads(payload)
        try:
            reply = ("ok", _handle(native, request, progress, sessions))
        except ValueError as exc:  # native InputError: bad IR, bitcode or pipeline
            reply = ("input", str(exc))
        except Exception as exc:  # noqa: BLE001 - anything else is reported, the worker lives on
            reply = ("error", f"{type(exc).__name__}: {exc}")
        payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        _write_all(out_fd, HEADER.pack(len(payload)) + payload)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
