"""``python -m fednorm``: the ``fednorm`` command (fednorm.cli)."""

import sys

from fednorm.cli import main

sys.exit(main())
