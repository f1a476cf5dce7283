"""``python -m fednorm.gpucheck``: see fednorm.gpucheck.check."""

import sys

from fednorm.gpucheck import main

sys.exit(main())
