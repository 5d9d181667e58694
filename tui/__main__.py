"""`python -m resenv.tui`: the same as the `resenv-tui` command."""

from .app import main

main()
