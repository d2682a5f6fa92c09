"""``python -m g2po_bench.analysis RESULTS_DIR --out DIR``: write the report (:mod:`g2po_bench.analysis.cli`)."""

import sys

from g2po_bench.analysis.cli import main

sys.exit(main())
