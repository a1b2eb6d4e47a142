"""``python -m testbed.cli``: the `testbed` command line."""
from testbed.cli.app import main

main()
