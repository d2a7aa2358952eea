"""``python -m gateway`` = the ``gateway`` command."""

from gateway.cli import main

main()
