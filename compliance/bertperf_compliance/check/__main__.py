"""``python -m bertperf_compliance.check``: same as ``bertperf-check``."""

import sys

from .cli import main

sys.exit(main())
