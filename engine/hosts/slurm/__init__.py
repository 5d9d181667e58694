"""Slurm hosts: resenv hands its sandbox commands to a cluster's own scheduler.

* ``states``  — Slurm job states and exit codes, decoded into what resenv means by them.
* ``client``  — the Slurm CLI (sbatch, squeue, scontrol, scancel, sacct, sinfo), run locally or on an
  SSH login node, with backoff while the controller does not answer.
* ``script``  — the batch script of one command: its own timeout, output files, exit status file.
* ``monitor`` — one poller per cluster: a single ``squeue`` call per tick for every tracked job.
* ``sandbox`` — the sandbox contract over all of it (one Slurm job per command that needs the cluster).
* ``host``    — the ``kind: slurm`` host: no GPU leasing, facts for ``resenv hosts check``.
"""
