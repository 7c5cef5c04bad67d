"""`python -m stkrelay ...`: the `stkrelay` command (stkrelay/cli.py)."""

import sys

from stkrelay.cli import main

sys.exit(main())
