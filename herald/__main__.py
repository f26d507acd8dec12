"""`python -m herald` is the `herald` command."""

import sys

from .cli import main

sys.exit(main())
