"""``python -m modelc`` (and ``torchrun ... -m modelc run ... --distributed``): the command line."""
from __future__ import annotations

import sys

from modelc.cli import main

if __name__ == "__main__":
    sys.exit(main())
