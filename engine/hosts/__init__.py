"""Hosts: where sandboxes run and what they have. `pool` (a host's slots and GPUs, leases), one
module per kind (`ssh`, `slurm/`), `build` (a run's hosts from the spec, the one module that knows
every kind), `remote` (one SSH connection per host), `fleet` (the hosts while a run runs),
`telemetry` and `gpuinfo` (what the GPUs do and are), `check` and `cli` (`resenv hosts check`)."""
