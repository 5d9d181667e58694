"""The `resenv` command line: `main` (the commands), `display` (plain progress lines tailing the
store), `assets` (`resenv assets`), `hosts` (`resenv hosts check`), `prune` (`resenv prune`), `load`
(a spec problem as one clear error)."""
