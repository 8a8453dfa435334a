"""``python -m evaluation``: the same as ``python -m evaluation.evaluate``."""

import sys

from evaluation.evaluate import main

sys.exit(main())
