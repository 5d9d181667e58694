"""The `resenv` command line: `main` (the commands), `display` (plain progress lines tailing the
store), `assets` (`resenv assets`), `prune` (`resenv prune`), `load` (a spec problem as one clear
error). `resenv hosts check` lives with the hosts (engine/hosts/cli.py)."""
