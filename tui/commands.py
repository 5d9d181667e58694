"""The ONE registry of dashboard commands.

It feeds the key bindings of every screen (`bindings_for`), the command palette (`RegistryProvider`,
a Textual command provider) and the help screen (`help_rows`). A command runs as
`screen.cmd_<name>()` (or `app.cmd_<name>()` when the screen has none); mutating commands are
refused in read-only mode before they reach a confirmation modal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from textual.screen import Screen

ALL = "*"
SCREEN_TITLES = {
    "overview": "Run overview", "job": "Job detail", "hosts": "Hosts", "history": "History", "compare": "Compare",
}


@dataclass(frozen=True)
class Command:
    name: str
    title: str
    help: str
    keys: tuple[str, ...] = ()
    screens: tuple[str, ...] = (ALL,)
    mutating: bool = False
    footer: bool = True  # shown in the footer (always in the palette and help)
    palette: bool = True
    short: str = ""  # the footer's label (default: the title)

    def applies_to(self, screen_id: str) -> bool:
        return ALL in self.screens or screen_id in self.screens

    @property
    def key_text(self) -> str:
        return " ".join(KEY_NAMES.get(key, key) for key in self.keys)


KEY_NAMES = {
    "question_mark": "?", "slash": "/", "space": "space", "escape": "esc", "enter": "enter",
    "ctrl+p": "^p", "ctrl+q": "^q", "ctrl+k": "^k", "left_square_bracket": "[", "right_square_bracket": "]",
}

# Screen-specific commands come before general ones: the first command to claim a key on a screen
# gets it (so `r` retries the selected tier in job detail and the selected job elsewhere).
COMMANDS: tuple[Command, ...] = (
    Command("retry_tier", "Retry tier", "Re-run the selected tier's probe on the kept post-agent state",
            ("r",), ("job",), mutating=True, short="Retry tier"),
    Command("open", "Open", "Open the selected job (overview) or run (history, read-only)", ("enter",),
            ("overview", "history"), footer=False),
    Command("back", "Back", "Close this view (on the overview: clear the filter)", ("escape",),
            ("overview", "job", "hosts", "history", "compare"), short="Back"),
    Command("mark", "Mark", "Mark or unmark the selected run for comparison", ("space",), ("history",)),
    Command("compare", "Compare", "repo × run matrix of pyramids for the marked runs", ("c",), ("history",)),
    Command("follow", "Follow transcript", "Jump to the end of the transcript and follow it", ("G", "end"),
            ("job",), short="Follow"),
    Command("next_tab", "Next tab", "Next tab (transcript, raw log, report, files)", ("right_square_bracket",),
            ("job",), footer=False),
    Command("prev_tab", "Previous tab", "Previous tab", ("left_square_bracket",), ("job",), footer=False),
    Command("filter", "Filter", "Show only rows containing the typed words (esc clears)", ("slash",),
            ("overview", "history")),
    Command("sort", "Sort", "Cycle the sort order", ("s",), ("overview", "history")),
    Command("pause_job", "Pause/resume job", "Freeze (SIGSTOP) or thaw the selected job's sandbox", ("p",),
            ("overview", "job"), mutating=True, short="Pause"),
    Command("pause_run", "Pause/resume run", "Stop or restart dispatching new jobs (running jobs go on)", ("P",),
            ("overview", "job", "hosts"), mutating=True, footer=False),
    Command("retry_job", "Retry job", "A new attempt of the selected job from scratch", ("r", "R"),
            ("overview", "job"), mutating=True, short="Retry"),
    Command("cancel_job", "Cancel job", "Kill the selected job's sandbox and mark it cancelled", ("ctrl+k",),
            ("overview", "job"), mutating=True, short="Cancel"),
    Command("cancel_run", "Cancel run", "Stop every job of the run, keep the results", (),
            ("overview", "job", "hosts"), mutating=True),
    Command("cursor_down", "Down", "Move down", ("j",), footer=False, palette=False),
    Command("cursor_up", "Up", "Move up", ("k",), footer=False, palette=False),
    Command("show_overview", "Run overview", "The run's jobs, pyramid and hosts", ("1",), short="Overview",
            footer=False),
    Command("show_hosts", "Hosts", "GPUs of every host: utilisation, memory, leases", ("2",)),
    Command("show_history", "History", "Every run in the store", ("3",)),
    Command("help", "Help", "Every key and command", ("question_mark",)),
    Command("palette", "Command palette", "Search every command", ("ctrl+p",), footer=False),
    Command("screenshot", "Save screenshot", "Write an SVG of the screen to the current directory", (),
            footer=False),
    Command("quit", "Quit", "Leave the dashboard (asks first while this process runs the engine)", ("q", "ctrl+q")),
)
BY_NAME = {command.name: command for command in COMMANDS}


def commands_for(screen_id: str) -> list[Command]:
    return [command for command in COMMANDS if command.applies_to(screen_id)]


def bindings_for(screen_id: str, readonly: bool = False) -> list[Binding]:
    """Key bindings of one screen, from the registry; the first command to claim a key wins.
    `readonly`: the mutating commands keep their keys (pressing one says it is refused) but leave
    the footer."""
    taken: set[str] = set()
    bindings = []
    for command in commands_for(screen_id):
        # A command whose main key another command took here stays out of the footer (ctrl+p finds it).
        shown = (command.footer and bool(command.keys) and command.keys[0] not in taken
                 and not (readonly and command.mutating))
        for key in command.keys:
            if key in taken:
                continue
            taken.add(key)
            bindings.append(Binding(
                key, f"run_command('{command.name}')", command.short or command.title, show=shown,
                key_display=KEY_NAMES.get(key), priority=key in ("ctrl+q",), tooltip=command.help,
            ))
            shown = False  # only the first key of a command shows in the footer
    return bindings


def help_rows(readonly: bool = False) -> list[tuple[str, str, str, str]]:
    """(keys, title, where, description) for every command, in registry order; keys are "" for a
    command only the palette runs; `*` marks the commands that change the run, which `readonly`
    leaves out."""
    rows = []
    for command in COMMANDS:
        if readonly and command.mutating:
            continue
        where = "everywhere" if ALL in command.screens else " ".join(command.screens)
        title = command.title + (" *" if command.mutating else "")
        rows.append((command.key_text, title, where, command.help))
    return rows


class RegistryProvider(Provider):
    """The command palette's commands: the registry's, for the active screen."""

    def _commands(self) -> list[tuple[Command, Screen]]:
        screen = self.screen
        screen_id = getattr(screen, "SCREEN_ID", None)
        if screen_id is None:  # the palette over a modal: offer the screen beneath
            for candidate in reversed(self.app.screen_stack):
                if getattr(candidate, "SCREEN_ID", None):
                    screen, screen_id = candidate, candidate.SCREEN_ID
                    break
        if screen_id is None:
            return []
        readonly = getattr(screen, "is_readonly", lambda: False)()
        return [(command, screen) for command in commands_for(screen_id)
                if command.palette and command.name != "palette" and not (readonly and command.mutating)]

    @staticmethod
    def _label(command: Command) -> str:
        return f"{command.title}" + (f"  ({command.key_text})" if command.keys else "")

    async def discover(self) -> Hits:
        for command, screen in self._commands():
            yield DiscoveryHit(self._label(command), partial(screen.run_command, command.name), help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command, screen in self._commands():
            label = self._label(command)
            score = max(matcher.match(label), matcher.match(command.help) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(label), partial(screen.run_command, command.name),
                          text=label, help=command.help)
