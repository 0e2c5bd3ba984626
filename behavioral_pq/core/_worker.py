"""Worker process of the engine: ``python -m behavioral_pq.core._worker PROGRESS_FILE THREADS``.

Reads length-prefixed pickled requests on stdin and answers on the original stdout. LLVM may abort the process
(report_fatal_error, a signal): the parent sees the pipe close and turns that into a typed error. File descriptor 1
is pointed at stderr so nothing LLVM prints can corrupt the protocol.
"""

from __future__ import annotations

import mmap
import os
import pickle
import struct
import sys

HEADER = struct.Struct("<Q")


def _read_exact(fd: int, n: int) -> bytes:
    chunks, remaining = [], n
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _handle(native, request, progress):
    op = request[0]
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
    while True:
        try:
            (size,) = HEADER.unpack(_read_exact(in_fd, HEADER.size))
            request = pickle.loads(_read_exact(in_fd, size))
        except EOFError:
            return 0
        try:
            reply = ("ok", _handle(native, request, progress))
        except ValueError as exc:  # native InputError: bad IR, bitcode or pipeline
            reply = ("input", str(exc))
        except Exception as exc:  # noqa: BLE001 - anything else is reported, the worker lives on
            reply = ("error", f"{type(exc).__name__}: {exc}")
        payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        _write_all(out_fd, HEADER.pack(len(payload)) + payload)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
