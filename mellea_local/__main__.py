"""``python -m mellea_local``: the command line."""

from mellea_local.cli import main

main()
