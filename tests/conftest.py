import atexit
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

import pytest

# Every test measures what it asks for: the on-disk spectrum cache is off unless a test turns it on, and it never
# touches the user's cache folder (subprocesses of the CLI inherit both).
os.environ["BPQ_NO_CACHE"] = "1"
os.environ["BPQ_CACHE_DIR"] = tempfile.mkdtemp(prefix="bpq-test-cache-")
atexit.register(shutil.rmtree, os.environ["BPQ_CACHE_DIR"], ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
EXAMPLES = Path(str(resources.files("behavioral_pq").joinpath("data/examples")))


@pytest.fixture(scope="session")
def engine():
    """A protected engine shared by the tests (2 workers)."""
    from behavioral_pq import Engine

    with Engine(workers=2, timeout=60) as e:
        yield e


@pytest.fixture(scope="session")
def examples():
    import behavioral_pq as bpq

    return {p.stem: bpq.load_module(p) for p in sorted(EXAMPLES.glob("*.c"))}


def plant_plugin(folder: Path, marker: Path) -> Path:
    """A unit ``a.c`` and a plugin ``evil.so`` in ``folder`` whose constructor creates ``marker`` when anything
    loads it (a clang plugin flag that gets through shows as the marker file)."""
    (folder / "a.c").write_text("int a(int x) { return x + 1; }\n")
    (folder / "evil.c").write_text('#include <stdio.h>\n__attribute__((constructor)) static void touch(void) '
                                   f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run(["clang-19", "-shared", "-fPIC", "-o", str(folder / "evil.so"), str(folder / "evil.c")],
                   check=True, timeout=60)
    return folder / "evil.so"
