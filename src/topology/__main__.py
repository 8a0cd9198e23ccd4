"""``python -m topology``: the same as the ``topology`` command."""

import sys

from ._cli.main import main

if __name__ == "__main__":
    sys.exit(main())
