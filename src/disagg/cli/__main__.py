"""`python -m disagg.cli …`: the same as the `disagg` console script."""

from disagg.cli import main

main()
