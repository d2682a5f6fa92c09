"""``python -m analysis RESULTS_DIR --out DIR``: write the report (see :mod:`analysis.report`)."""

import sys

from analysis.report import main

sys.exit(main())
