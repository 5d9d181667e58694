"""The parts of the built-in baseline agent (`baseline_agent.py` beside this package), stdlib-only:
they are staged into the sandbox with the script and run with the sandbox's own python3."""
