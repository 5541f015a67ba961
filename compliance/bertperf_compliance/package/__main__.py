"""``python -m bertperf_compliance.package``: same as ``bertperf-package``."""

import sys

from .cli import main

sys.exit(main())
