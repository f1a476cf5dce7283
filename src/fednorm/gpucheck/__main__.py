"""``python -m fednorm.gpucheck``: see fednorm.gpucheck."""

import sys

from fednorm.gpucheck import main

sys.exit(main())
