"""The store: one SQLite file per data dir, everything a run knows. `db` (the one writer task fed by
a queue, read-only readers, the controls table), `schema` (ordered migrations)."""
