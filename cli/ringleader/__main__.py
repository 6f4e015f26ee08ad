"""`python -m ringleader ...`, the same as the `ringleader` command."""

import sys

from .cli import main

sys.exit(main())
