"""resenv engine: spec, store, scheduler, job lifecycle, hosts, sandboxes, CLI."""
__version__ = "0.1.0"
