"""Tables that fit the terminal: the least important columns go first, the key ones never.

Rich shrinks a table that is too wide by wrapping every column, which folds tier glyphs over lines
and cuts job names to `tiny…`. A listing here names each column's priority instead; columns are
dropped, least important first, until the table fits the console's width (a terminal's, or COLUMNS
when piped), and the columns that remain never wrap.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.table import Table

KEEP = 0
"""The priority of a column that is never dropped (an id, a state, a tier)."""


@dataclass(frozen=True)
class Column:
    name: str
    priority: int = KEEP  # higher goes first when the table is too wide; KEEP never goes
    justify: str = "left"


def fitted_table(columns: list[Column], rows: list[list[str]], width: int) -> Table:
    """A table of `rows` with as many of `columns` as fit in `width` cells (rich's default box:
    one border cell, then per column its content, two padding cells and one separator)."""
    kept = list(range(len(columns)))

    def needed(indexes: list[int]) -> int:
        return 1 + sum(3 + max([cell_len(columns[i].name), *(cell_len(row[i]) for row in rows)]) for i in indexes)

    droppable = sorted((i for i, column in enumerate(columns) if column.priority != KEEP),
                       key=lambda i: (-columns[i].priority, -i))
    for index in droppable:
        if needed(kept) <= width:
            break
        kept.remove(index)
    table = Table()
    for i in kept:
        # a kept column never wraps; the widest one (a reason, say) folds only if it must
        table.add_column(columns[i].name, justify=columns[i].justify,  # type: ignore[arg-type]
                         no_wrap=columns[i].priority == KEEP)
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    return table
