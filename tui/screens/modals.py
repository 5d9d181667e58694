"""The modal screens: a confirmation before a control, and the help (every command and key)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ..commands import help_rows
from ..widgets import LEGEND


class ConfirmScreen(ModalScreen[bool]):
    """Every mutating action goes through here, naming its target."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n", "answer(False)", "No"),
                Binding("escape", "answer(False)", "No", show=False)]

    def __init__(self, question: str, detail: str = "", yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.question, "bold"), id="confirm-question")
            if self.detail:
                yield Static(Text(self.detail, "grey70"), id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class HelpScreen(ModalScreen[None]):
    """Every key, then the commands only the palette has; in read-only mode without the commands it refuses."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, readonly: bool = False) -> None:
        super().__init__()
        self.readonly = readonly

    @staticmethod
    def _table(first: str) -> Table:
        table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
        table.add_column(first, style="bold cyan", no_wrap=True, width=8)
        table.add_column("command", no_wrap=True, width=20)
        table.add_column("where", style="grey62", ratio=1)
        table.add_column("what it does", style="grey85", ratio=2)
        return table

    def compose(self) -> ComposeResult:
        keyed, palette = self._table("keys"), self._table("")
        for keys, title, where, description in help_rows(readonly=self.readonly):
            (keyed if keys else palette).add_row(keys, title, where, description)
        note = ("read-only: pause, resume, retry and cancel are refused, so they are not listed."
                if self.readonly else "* changes the run: asks for confirmation naming its target, then shows the "
                "engine's acknowledgement; refused with --readonly.")
        body = Group(
            Text("resenv-tui · keys and commands (the same list feeds the footer and ctrl+p)", "bold"), Text(""),
            keyed, Text("home end pgup pgdn  in every list and view; on a job's tiers they (and ← →) scroll the "
                        "open tab", "grey62"),
            Text(""), Text("In the command palette only (ctrl+p, then type its name)", "bold"), palette,
            Text(""), Text(note, "grey62"), Text.assemble(("tiers  ", "grey62"), LEGEND),
        )
        with VerticalScroll(id="help"):
            yield Static(body)

    def action_close(self) -> None:
        self.dismiss(None)
