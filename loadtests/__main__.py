"""``python -m loadtests`` = the ``loadtests`` command."""

from loadtests.cli import main

main()
