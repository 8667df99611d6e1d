"""`python -m cli ARGS`: the same as `nmt ARGS`."""
import sys

from cli.main import main

sys.exit(main())
