"""Hosts: where sandboxes run and what they have. `pool` (a host's slots and GPUs, leases), one
module per kind (`ssh`, `slurm/`), `build` (a run's hosts from the spec, the one module that knows
every kind), `fleet` (the hosts while a run runs), `telemetry` and `gpuinfo` (what the GPUs do and
are), `check` (a host's facts and problems, for `resenv hosts check` in engine/cli/hosts.py)."""
