"""``python -m analysis RESULTS_DIR --out DIR``: write the report (see :mod:`g2po_bench.analysis.report`)."""

import sys

from g2po_bench.analysis.report import main

sys.exit(main())
