"""``python -m builder`` = the ``builder`` command."""

from builder.cli.main import main

main()
