"""`python -m cli ARGS`: the same as `nmt ARGS`."""
from cli.main import entry_point

entry_point()
