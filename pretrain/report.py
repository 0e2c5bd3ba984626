"""Masked-code accuracy of a pretraining run against the frequency baseline and a context-free run, and mean vs
[CLS] pooling (see behavioral_pq.reports.pretraining).

    python pretrain/report.py RUN [--context-free RUN_CF] [--store STORE] --out pretrain/results
"""

import argparse
from pathlib import Path

from behavioral_pq.reports.pretraining import mlm_report, write_report

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("run")
parser.add_argument("--context-free", metavar="RUN", help="a run of pretrain/context-free.toml on the same data")
parser.add_argument("--store", help="corpus store with labels, for the pooling comparison")
parser.add_argument("--out", required=True)
args = parser.parse_args()
write_report(mlm_report(args.run, context_free_run=args.context_free, store=args.store), Path(args.out))
print((Path(args.out) / "REPORT.md").read_text())
