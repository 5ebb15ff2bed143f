"""`python -m etriage ...`: the command line, from whichever checkout is first on sys.path."""
import sys

from etriage.cli import main

sys.exit(main())
