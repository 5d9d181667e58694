"""Finding a run by id, unique id prefix or ``latest``.

Shared by the store and the dashboard, which reads the database without importing the store
(``sqlite_utils`` would cost its start-up); each passes its own query function and error class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Rows = Callable[[str, tuple[Any, ...]], list[dict[str, Any]]]


def find_run(rows: Rows, ref: str | None, where: object, error: type[Exception]) -> dict[str, Any]:
    """The run `ref` names (None or ``latest``: the newest); raises `error` naming `where` if none or several."""
    if ref is not None and not ref.strip():  # `LIKE '%'` would match every run
        raise error("an empty run id: give a run id, a unique prefix of one, or `latest`")
    if ref in (None, "latest"):
        found = rows("SELECT * FROM runs ORDER BY created_at DESC LIMIT 1", ())
        if not found:
            raise error(f"no runs in {where}")
        return found[0]
    found = rows("SELECT * FROM runs WHERE id = ? OR id LIKE ?", (ref, f"{ref}%"))
    exact = [row for row in found if row["id"] == ref]
    if exact:
        return exact[0]
    if len(found) == 1:
        return found[0]
    if not found:
        raise error(f"no run {ref!r} in {where}")
    raise error(f"{ref!r} matches several runs: {', '.join(row['id'] for row in found)}")
