"""The store's schema as an ordered list of migrations.

`PRAGMA user_version` holds how many migrations a DB has had; opening a DB applies the rest in one
transaction, so an old DB is upgraded in place and a newer one is refused instead of misread.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: the first schema.
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        benchmark_path TEXT NOT NULL,
        base_dir TEXT NOT NULL,
        suite TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        options_json TEXT NOT NULL,
        data_dir TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        engine_pid INTEGER,
        engine_host TEXT,
        heartbeat_at REAL
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        key TEXT NOT NULL,
        suite TEXT NOT NULL,
        repo_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        gpus_needed INTEGER NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        host TEXT,
        gpus TEXT,
        reason TEXT,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        UNIQUE (run_id, key)
    );
    CREATE INDEX jobs_run ON jobs(run_id, state);
    CREATE TABLE attempts (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        number INTEGER NOT NULL,
        state TEXT NOT NULL,
        phase TEXT,
        host TEXT,
        gpus TEXT,
        workdir TEXT,
        category TEXT,
        reason TEXT,
        started_at REAL NOT NULL,
        finished_at REAL,
        heartbeat_at REAL,
        UNIQUE (job_id, number)
    );
    CREATE INDEX attempts_run ON attempts(run_id, state);
    CREATE TABLE phases (
        id INTEGER PRIMARY KEY,
        attempt_id INTEGER NOT NULL REFERENCES attempts(id),
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at REAL NOT NULL,
        finished_at REAL,
        reason TEXT
    );
    CREATE INDEX phases_attempt ON phases(attempt_id);
    CREATE TABLE tier_results (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        attempt_id INTEGER NOT NULL REFERENCES attempts(id),
        tier TEXT NOT NULL,
        status TEXT NOT NULL,
        category TEXT,
        evidence_json TEXT,
        created_at REAL NOT NULL
    );
    CREATE INDEX tier_results_job ON tier_results(job_id, tier);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        job_id INTEGER,
        attempt_id INTEGER,
        seq INTEGER,
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX events_run ON events(run_id, id);
    CREATE UNIQUE INDEX events_attempt_seq ON events(attempt_id, seq) WHERE attempt_id IS NOT NULL;
    CREATE TABLE usage (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        job_id INTEGER NOT NULL,
        attempt_id INTEGER NOT NULL,
        ts REAL NOT NULL,
        model TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        cached_input_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        reasoning_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL
    );
    CREATE INDEX usage_job ON usage(job_id);
    CREATE TABLE logs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        job_id INTEGER,
        attempt_id INTEGER,
        name TEXT NOT NULL,
        stream TEXT NOT NULL,
        path TEXT NOT NULL,
        nbytes INTEGER NOT NULL,
        nlines INTEGER NOT NULL,
        head TEXT NOT NULL,
        tail TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX logs_attempt ON logs(attempt_id);
    CREATE TABLE hosts (
        run_id TEXT NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        inventory_json TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE leases (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        job_id INTEGER NOT NULL,
        attempt_id INTEGER NOT NULL,
        host TEXT NOT NULL,
        gpus TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL
    );
    CREATE TABLE gpu_samples (
        id INTEGER PRIMARY KEY,
        host TEXT NOT NULL,
        gpu INTEGER NOT NULL,
        ts REAL NOT NULL,
        util_pct REAL,
        mem_used_mib REAL,
        mem_total_mib REAL,
        power_w REAL,
        temp_c REAL
    );
    CREATE INDEX gpu_samples_host ON gpu_samples(host, gpu, ts);
    CREATE TABLE controls (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        job_id INTEGER,
        tier TEXT,
        action TEXT NOT NULL,
        created_at REAL NOT NULL,
        origin TEXT,
        acked_at REAL,
        ack TEXT,
        ack_message TEXT
    );
    CREATE INDEX controls_pending ON controls(run_id, acked_at);
    """,
    # 2: an attempt's scope: the whole job, or one tier re-run on a kept post-agent state.
    """
    ALTER TABLE attempts ADD COLUMN scope TEXT NOT NULL DEFAULT 'job';
    """,
    # 3: integrity findings of an attempt: what the agent changed that the probes do not judge on
    # (a tracked file edited, a file shadowing an import, an interpreter start-up hook).
    """
    CREATE TABLE findings (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        attempt_id INTEGER NOT NULL REFERENCES attempts(id),
        kind TEXT NOT NULL,
        path TEXT NOT NULL,
        action TEXT NOT NULL,
        detail_json TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX findings_job ON findings(job_id);
    """,
    # 4: scorings: the verdicts a run recorded live (`original`, number 0) and every later rescore of
    # its kept post-agent states, each with the rules version that judged it. A tier result with
    # no scoring_id belongs to its run's original scoring; runs from before this migration get an
    # original scoring whose rules version is unknown. `scoring_jobs` says per job what a rescore
    # did (rescored, partial, not_rescored) and why. A scoring's state is running, done, interrupted
    # or empty (it could judge no job); readers' `latest` is the newest done one. `engine_pid`, `engine_host` and
    # `heartbeat_at` tell a live rescore from a dead one.
    """
    CREATE TABLE scorings (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        number INTEGER NOT NULL,
        label TEXT NOT NULL,
        rules_version TEXT NOT NULL,
        tiers_json TEXT,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        finished_at REAL,
        engine_pid INTEGER,
        engine_host TEXT,
        heartbeat_at REAL,
        UNIQUE (run_id, number)
    );
    CREATE TABLE scoring_jobs (
        scoring_id INTEGER NOT NULL REFERENCES scorings(id),
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        kept_attempt INTEGER,
        attempt_id INTEGER,
        outcome TEXT NOT NULL,
        reason TEXT,
        PRIMARY KEY (scoring_id, job_id)
    );
    ALTER TABLE tier_results ADD COLUMN scoring_id INTEGER REFERENCES scorings(id);
    CREATE INDEX tier_results_scoring ON tier_results(run_id, scoring_id);
    INSERT INTO scorings (run_id, number, label, rules_version, state, created_at, finished_at)
        SELECT id, 0, 'original', 'unknown (before versioning)', 'done', created_at, finished_at FROM runs;
    """,
    # 5: what the dashboard and the report read of every tier result of a run (its verdicts, not their
    # evidence), from the index alone: each row's evidence would otherwise be read with it (a finished
    # 10,000-job run's 60,000 results took 0.16 s instead of 0.10 s to read).
    """
    CREATE INDEX tier_results_shown ON tier_results(run_id, scoring_id, id, job_id, attempt_id, tier, status);
    """,
    # 6: a phase's own working time apart from its wall time: `active_s` leaves out what its commands
    # spent not running (in a cluster's queue, held or suspended by a pause, paused), `queued_s` is
    # the time its commands waited in a cluster's queue. NULL in phases recorded before: their wall
    # time is all they have.
    """
    ALTER TABLE phases ADD COLUMN active_s REAL;
    ALTER TABLE phases ADD COLUMN queued_s REAL;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)
