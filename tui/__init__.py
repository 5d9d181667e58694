"""resenv-tui: the Textual dashboard."""
