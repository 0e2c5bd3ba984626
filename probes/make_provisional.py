"""Write the provisional probe set that shipped before the searched one (it still ships, as a baseline).

    python probes/make_provisional.py [--num-probes 100] [--length 50] [--seed 0]

The set is seeded uniform-random sequences over the 124 catalog passes: it measures *something* stable, but it
was not searched and carries ``"provisional": true``.
"""

import argparse
from pathlib import Path

from behavioral_pq.embedding.probes import random_probes

PACKAGE_PROBES = Path(__file__).resolve().parent.parent / "behavioral_pq" / "data" / "probes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-probes", type=int, default=100)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=PACKAGE_PROBES)
    args = parser.parse_args()
    probes = random_probes(args.num_probes, args.length, args.seed)
    path = probes.save(args.out / f"{probes.name}.json")
    print(f"wrote {path} (hash {probes.hash[:12]})")


if __name__ == "__main__":
    main()
