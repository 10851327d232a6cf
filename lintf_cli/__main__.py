"""``python -m lintf_cli``: the ``lintf`` console script."""

from lintf_cli import main

main()
