"""``python -m scenarios.evaluate``: an alias of ``python -m evaluation`` (the evaluation moved there).

The one module of ``scenarios`` that imports a layer above it; nothing in the project imports it.
"""

import sys

from evaluation.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
