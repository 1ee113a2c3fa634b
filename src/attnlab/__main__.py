"""`python -m attnlab ...`: the command line, as the `attnlab` command runs it."""

import sys

from attnlab.app.cli import main

sys.exit(main())
