"""Running a run: the scheduler's loop, the dispatch policy and its estimates, operator controls,
recovery and the run lock, and each job attempt's lifecycle (ARCHITECTURE.md, "Scheduling")."""
