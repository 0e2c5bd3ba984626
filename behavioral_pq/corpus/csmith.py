"""Random C programs from Csmith (the distribution's ``csmith``), a second source of corpus modules.

Every program gets its own Csmith seed and size options drawn from one seeded generator, so ``generate_csmith(N,
seed=S)`` is reproducible; ``csmith.json`` next to the programs records the Csmith version, every seed and option
list, and the programs Csmith failed to produce. Build them with the include directory of ``csmith.h``::

    bpq corpus build OUT_DIR --out STORE --origin csmith --include /usr/include/csmith
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import stat
from pathlib import Path
from typing import List, Sequence

from behavioral_pq.artifacts import write_bytes_atomic, write_json_atomic
from behavioral_pq.core.toolchain import run_tool
from behavioral_pq.errors import CorpusError, ToolError, ToolNotFoundError, ToolTimeoutError

logger = logging.getLogger(__name__)

#: Where Debian's libcsmith-dev puts csmith.h.
CSMITH_INCLUDE = "/usr/include/csmith"
#: The largest Csmith seed: ``--seed`` is an unsigned long, and Csmith reads any larger (or negative) number as
#: this one, so two such seeds would name one program.
CSMITH_MAX_SEED = 2 ** 64 - 1


def find_csmith() -> str:
    """Path of ``csmith`` (``$BPQ_CSMITH`` or PATH)."""
    path = os.environ.get("BPQ_CSMITH") or shutil.which("csmith")
    if not path:
        raise ToolNotFoundError("csmith not found; install it (apt-get install csmith libcsmith-dev)")
    return path


def csmith_version() -> str:
    out = run_tool([find_csmith(), "--version"], timeout=30).stdout.decode(errors="replace")
    return " ".join(out.split())


def csmith_program(seed: int, options: Sequence[str] = (), *, timeout: float = 60.0) -> bytes:
    """The C program Csmith writes for ``seed`` (0..:data:`CSMITH_MAX_SEED`) and ``options``; a seed outside that
    range raises a CorpusError instead of giving the program of another seed."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= CSMITH_MAX_SEED:
        raise CorpusError(f"csmith seed {seed!r} is not an integer in 0..{CSMITH_MAX_SEED} (2^64 - 1): csmith "
                          f"reads every larger seed as {CSMITH_MAX_SEED}")
    return run_tool([find_csmith(), "--seed", str(seed), *options], timeout=timeout).stdout


def _options(rng: random.Random) -> List[str]:
    """Varied program shapes: few or many functions, shallow or deep blocks, simple or complex expressions."""
    return ["--max-funcs", str(rng.randint(1, 8)), "--max-block-depth", str(rng.randint(2, 5)),
            "--max-expr-complexity", str(rng.randint(2, 10)), "--max-array-dim", str(rng.randint(1, 3))]


def _kept(path: Path) -> bool:
    """Whether ``path`` holds a program written before (a regular file, not a link: it is kept); False when it is
    to be written (absent, or a symbolic link, which is replaced, never followed). CorpusError for anything else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        logger.warning("%s: a symbolic link where a Csmith program goes; replaced by the program", path)
        return False
    if not stat.S_ISREG(mode):
        raise CorpusError(f"{path}: is not a regular file (a folder, FIFO, device or socket) where a Csmith program "
                          "goes; remove it")
    return True


def generate_csmith(count: int, out: os.PathLike, *, seed: int = 0, timeout: float = 30.0,
                    progress: bool = False) -> dict:
    """Write ``count`` Csmith programs ``csmith-<seed>-<i>.c`` into ``out``; skip files already there.

    Only a regular file is kept as Csmith's program: a symbolic link at a program's name is replaced by the
    program (never followed), and anything else there (a FIFO, a device, a folder) is refused.

    Returns:
        the record written to ``out/csmith.json``: version, seed, programs (file, csmith seed, options) and
        failures (Csmith runs that timed out or failed).
    Raises:
        CorpusError: a program's name in ``out`` is taken by something else than a regular file or a link.
    """
    if count < 0:
        raise ValueError("count must be >= 0")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    find_csmith()   # no csmith: one error before any work
    rng = random.Random(seed)
    programs, failures = [], []
    from tqdm.auto import tqdm

    for i in tqdm(range(count), desc="csmith", unit="program", disable=not progress):
        program_seed = rng.randrange(2 ** 31)
        options = _options(rng)
        name = f"csmith-{seed}-{i:06d}.c"
        entry = {"file": name, "csmith_seed": program_seed, "options": options}
        path = out / name
        if not _kept(path):
            try:
                text = csmith_program(program_seed, options, timeout=timeout)
            except (ToolError, ToolTimeoutError) as exc:
                failures.append(dict(entry, error=str(exc)))
                continue
            write_bytes_atomic(path, text)  # a killed run never leaves a half-written program
        programs.append(entry)
    record = {"generator": "csmith", "version": csmith_version(), "seed": seed, "count": count,
              "include": CSMITH_INCLUDE, "programs": programs, "failures": failures}
    write_json_atomic(out / "csmith.json", record)
    return record
