"""``python -m behavioral_pq`` is ``bpq`` (and ``torchrun -m behavioral_pq pretrain ...`` runs data parallel)."""

import sys

from behavioral_pq.cli.main import main

sys.exit(main())
