"""C0 for environments that live on another machine or in a container: judge a recorded import map.

pyright needs node and resenv's pinned pyright; a GPU host or an agent's container has neither, and
installing them there would change the very environment being judged. So the host only records its
import map (``probes/kit/importmap.py``: the interpreter's answers and the skeleton of its search
paths), and the engine's machine rebuilds that skeleton under a local *mirror* root and runs the
same :func:`resenv.probes.c0.run_c0` against it. The interpreter pyright queries there is a *replay
interpreter*: a tiny shell script that answers pyright's three questions (``sys.version``,
``sys.version_info``, the search paths and prefix) from the record, with every path moved under the
mirror. When the record could not be taken (the reported interpreter is missing or broken), the
replay interpreter fails with the host's own error, so C0 judges it exactly as it would locally.
"""

from __future__ import annotations

import io
import json
import shlex
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAP_MEMBER = "importmap.json"
ROOT_MEMBER = "root"


@dataclass(frozen=True)
class Mirror:
    """Where C0 looks instead of the host: the replay interpreter and the repo under the mirror."""

    python: Path
    repo: Path
    notes: tuple[str, ...] = ()


def under(root: Path, host_path: str) -> Path:
    """`host_path` (absolute on the host) as it lies under the mirror `root`."""
    return root / host_path.lstrip("/")


def _replay_script(answers: Path) -> str:
    """pyright's version query and path query share a prelude, so version_info is matched first."""
    def cat(name: str) -> str:
        return f"cat {shlex.quote(str(answers / name))}"
    return "\n".join([
        "#!/bin/sh",
        "# resenv C0 replay interpreter: answers pyright from the import map recorded on the job's host",
        'case "$*" in',
        f"  *version_info*) {cat('version_info.json')} ;;",
        f"  *orig_sys_path*) {cat('search_paths.json')} ;;",
        f"  *sys.version*) {cat('version.txt')} ;;",
        '  *) echo "resenv replay interpreter: unexpected call: $*" >&2; exit 2 ;;',
        "esac",
        "",
    ])


def _failing_script(error: str) -> str:
    return "#!/bin/sh\ncat >&2 <<'RESENV_EOF'\n" + error.rstrip("\n") + "\nRESENV_EOF\nexit 1\n"


def _write_interpreter(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def failed_mirror(dest: Path, repo: str, error: str) -> Mirror:
    """The map could not be recorded: a replay interpreter that fails with `error`, and the repo path."""
    if dest.exists():
        shutil.rmtree(dest)
    python = _write_interpreter(dest / "answers" / "python", _failing_script(error))
    return Mirror(python=python, repo=under(dest / ROOT_MEMBER, repo))


def facts_problem(facts: Any) -> str | None:
    """Why the recorded facts are unusable (each must have the type importmap.py writes), or None.
    They are the reported interpreter's answer, so any JSON may come back."""
    if not isinstance(facts, dict):
        return f"its facts are not a JSON object (got {type(facts).__name__})"
    wanted = {"version": str, "version_info": list, "path": list, "prefix": str, "repo": str}
    for key, kind in wanted.items():
        if not isinstance(facts.get(key), kind):
            return f"its facts' {key} is not a {'list' if kind is list else 'string'}"
    if not all(isinstance(path, str) for path in facts["path"]):
        return "its facts' path holds something that is not a string"
    if not all(isinstance(part, (int, str)) and not isinstance(part, bool) for part in facts["version_info"]):
        return "its facts' version_info holds something that is not a number or a string"
    if not (facts.get("entries") is None or (isinstance(facts["entries"], int) and not isinstance(facts["entries"], bool))):
        return "its facts' entries is not a number"
    if not isinstance(facts.get("truncated", False), bool):
        return "its facts' truncated is not true or false"
    return None


def build_mirror(archive: bytes, dest: Path) -> Mirror:
    """Unpack a recorded import map under `dest` (replacing what was there) and write its replay
    interpreter. The archive comes from the agent's environment, so it is untrusted: members are
    extracted with tarfile's ``data`` filter (no absolute paths, no links leaving `dest`, no
    devices), and a map without its facts, or with facts of the wrong types, is refused with
    ValueError."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        member = tar.getmember(MAP_MEMBER)
        extracted = tar.extractfile(member)
        if extracted is None:
            raise ValueError("the import map has no facts")
        facts = json.loads(extracted.read())
        if (problem := facts_problem(facts)) is not None:
            raise ValueError(f"the import map is malformed: {problem}")
        tar.extractall(dest, members=[m for m in tar.getmembers() if m.name.startswith(ROOT_MEMBER + "/")],
                       filter="data")
    root = dest / ROOT_MEMBER
    root.mkdir(exist_ok=True)
    paths, prefix, repo = facts["path"], facts["prefix"], facts["repo"]
    answers = dest / "answers"
    answers.mkdir()
    (answers / "version.txt").write_text(facts["version"] + "\n")
    (answers / "version_info.json").write_text(json.dumps(facts["version_info"]))
    (answers / "search_paths.json").write_text(json.dumps({
        "path": [str(under(root, p)) for p in paths], "prefix": str(under(root, prefix))}))
    python = _write_interpreter(answers / "python", _replay_script(answers))
    notes = [f"import map recorded on the host: {facts.get('entries', '?')} entries"]
    if facts.get("truncated"):
        notes.append("the host's import map was cut at its entry limit: imports beyond it count as missing")
    return Mirror(python=python, repo=under(root, repo), notes=tuple(notes))
