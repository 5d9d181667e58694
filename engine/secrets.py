"""Secrets for agents (API keys, endpoints) and their redaction from everything resenv stores.

Where secrets come from (per agent in benchmark.yaml): ``env_from: [ANTHROPIC_API_KEY, ...]`` names
variables of the engine's own environment, ``env_file: path`` names a dotenv-style file
(``NAME=value`` lines, ``export`` prefixes, quotes and ``#`` comments allowed). Every value from
either source is a secret: it is passed to the agent process only (never to probes, never into a
template, never into the run's spec snapshot, which holds names and paths only) and redacted by
value wherever resenv stores text. Put settings that are not secret in the agent's ``env:``.

Redaction is by value, for values of at least `MIN_SECRET_CHARS` characters (shorter ones would
mangle ordinary text), and also catches a value's JSON-escaped and URL-quoted spellings. It covers:

* every byte a sandboxed command prints, as it streams: each sandbox's `OutputSink`
  (engine/sandbox/common.py) feeds its chunks through a `StreamRedactor` of the registry before the
  raw log file, the line splitter (so every event) and the screen see them, marker
  ``[REDACTED:NAME]``. A secret is replaced before its first byte is written, however it was split
  across reads; only a tail that could still become a secret is held back, so output is not delayed;
* every event before it is queued for the store (`redact_obj`, called by the lifecycle's
  `EventSink`), which includes replayed lines after a crash — the process-wide registry (`register`)
  is filled when agent adapters are built, before any replay;
* the raw log files once more when their command exits (`redact_file`), for the one kind whose raw
  files the command writes itself: a Slurm job on a file system shared with the engine (see
  engine/hosts/slurm/sandbox.py);
* every file the agent created or changed in its work dir (its report, its HOME, the env it built),
  masked in place with a same-length mask so binaries stay valid (`scrub_tree`), right after the
  agent exits and before any probe reads the report;
* after a crash, on `resenv run --resume`: an engine killed while an agent ran leaves that attempt's
  work files as the agent wrote them, so before anything reads them (before its raw lines are
  replayed into the store, before any excerpt) the resume rewrites every raw log of the attempt
  (a safety net) and masks every file of its attempt dir changed since the attempt started
  (`scrub_attempt`). A resume refuses to start when a declared secret cannot be loaded: without
  its value nothing could be redacted.

The agent CLIs' own state, which copies tool outputs and the environment (Claude Code's
``~/.claude`` and temp folder, Codex's ``CODEX_HOME``), is kept on a tmpfs of the agent command's
namespace by the local process sandbox (the lifecycle's ``_keep_private_state``), so it never
reaches the disk there.

The window left: a file the agent itself writes into its work dir holds what it wrote until the
agent exits (then `scrub_tree`) or the next resume; so does the CLIs' state where the sandbox cannot
keep it in memory (``unsafe-process``, SSH hosts, docker containers, Slurm).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIN_SECRET_CHARS = 8
CHUNK = 1 << 20
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------------------------------
# loading


@dataclass
class AgentSecrets:
    """What one agent gets: `env` for its process; `problems` say what could not be loaded."""

    env: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def parse_env_file(text: str) -> tuple[dict[str, str], list[str]]:
    """A dotenv-style file -> (values, problems). Values are taken literally (no interpolation)."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not _ENV_NAME.match(name):
            problems.append(f"line {number}: expected NAME=value")
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
            if raw.strip().split("=", 1)[1].strip().startswith('"'):
                value = value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[name] = value
    return values, problems


def load_secrets(env_from: Iterable[str] = (), env_file: str | os.PathLike[str] | None = None,
                 environ: Mapping[str, str] | None = None) -> AgentSecrets:
    """Read an agent's secrets from the engine's environment and its env file."""
    environ = os.environ if environ is None else environ
    out = AgentSecrets()
    if env_file is not None:
        path = Path(env_file)
        try:
            values, problems = parse_env_file(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            out.problems.append(f"env_file {path}: {getattr(error, 'strerror', None) or error}")
        else:
            out.env.update(values)
            out.problems += [f"env_file {path}: {problem}" for problem in problems]
    for name in env_from:
        value = environ.get(name)
        if value is None or value == "":
            out.problems.append(f"env_from {name}: not set in the engine's environment")
        else:
            out.env[name] = value
    return out


# --------------------------------------------------------------------------------------------------
# redaction


def _variants(value: str) -> set[str]:
    found = {value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1],
             urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe="")}
    return {variant for variant in found if len(variant) >= MIN_SECRET_CHARS}


class Redactor:
    """Replaces known secret values in text, bytes, JSON-like objects and files."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        self.names: dict[str, str] = {}  # variant -> the name it came from
        self._compile()
        if secrets:
            self.add(secrets)

    def add(self, secrets: Mapping[str, str]) -> None:
        for name, value in secrets.items():
            if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS:
                for variant in _variants(value):
                    self.names.setdefault(variant, name)
        self._compile()

    def _compile(self) -> None:
        ordered = sorted(self.names, key=len, reverse=True)  # longest first: no partial leftovers
        self._text = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._bytes_variants = [variant.encode() for variant in ordered]
        self._bytes = re.compile(b"|".join(map(re.escape, self._bytes_variants))) if ordered else None
        self._bytes_names = {variant.encode(): name for variant, name in self.names.items()}
        self.longest = max((len(v) for v in self._bytes_variants), default=0)
        # the bytes a variant starts with: where a stream may have to hold back a secret's beginning
        self._starts = bytes(sorted({v[0] for v in self._bytes_variants}))

    def __bool__(self) -> bool:
        return bool(self.names)

    # -- text ----------------------------------------------------------------------------------
    def marker(self, name: str, original: str) -> str:
        return f"[REDACTED:{name}]" + "\n" * original.count("\n")

    def redact_text(self, text: str) -> str:
        if self._text is None or not text:
            return text
        return self._text.sub(lambda m: self.marker(self.names[m.group(0)], m.group(0)), text)

    def redact_obj(self, obj: Any) -> Any:
        """A copy of a JSON-like value with every string (keys included) redacted; unchanged objects
        are returned as they are."""
        if self._text is None:
            return obj
        if isinstance(obj, str):
            return self.redact_text(obj) if self._text.search(obj) else obj
        if isinstance(obj, dict):
            changed = False
            out = {}
            for key, value in obj.items():
                new_key = self.redact_obj(key) if isinstance(key, str) else key
                new_value = self.redact_obj(value)
                changed = changed or new_key is not key or new_value is not value
                out[new_key] = new_value
            return out if changed else obj
        if isinstance(obj, (list, tuple)):
            items = [self.redact_obj(item) for item in obj]
            if any(new is not old for new, old in zip(items, obj)):
                return type(obj)(items) if isinstance(obj, tuple) else items
            return obj
        return obj

    # -- bytes ---------------------------------------------------------------------------------
    def _mask(self, match: bytes, same_length: bool) -> bytes:
        if same_length:
            mask = bytearray((b"REDACTED" + b"*" * len(match))[: len(match)])
            for index, byte in enumerate(match):
                if byte == 0x0A:
                    mask[index] = 0x0A
            return bytes(mask)
        return self.marker(self._bytes_names[match], match.decode(errors="replace")).encode()

    def contains(self, data: bytes) -> bool:
        return any(variant in data for variant in self._bytes_variants)

    def redact_bytes(self, data: bytes, *, same_length: bool = False) -> bytes:
        if self._bytes is None or not self.contains(data):
            return data
        return self._bytes.sub(lambda m: self._mask(m.group(0), same_length), data)

    def stream(self, *, same_length: bool = False) -> StreamRedactor:
        return StreamRedactor(self, same_length)

    # -- files ---------------------------------------------------------------------------------
    def file_contains(self, path: Path) -> bool:
        if not self:
            return False
        overlap = self.longest - 1
        tail = b""
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                if self.contains(tail + chunk):
                    return True
                tail = (tail + chunk)[-overlap:] if overlap else b""
        return False

    def redact_file(self, path: Path) -> bool:
        """Rewrite a log file with markers where secrets were; True if it changed."""
        path = Path(path)
        if not self or not path.is_file() or not self.file_contains(path):
            return False
        stream = self.stream()
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".redacting")
        try:
            with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
                while chunk := src.read(CHUNK):
                    out.write(stream.feed(chunk))
                out.write(stream.flush())
            os.chmod(temp, path.stat().st_mode & 0o7777)
            os.replace(temp, path)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise
        return True

    def mask_file_in_place(self, path: Path) -> bool:
        """Overwrite each secret in a file with a same-length mask (binaries stay valid)."""
        if not self or not self.file_contains(path):
            return False
        offsets: list[tuple[int, bytes]] = []
        overlap = self.longest - 1
        with open(path, "rb") as handle:
            base = 0  # file offset of buf[0]
            buf = b""
            while True:
                chunk = handle.read(CHUNK)
                buf += chunk
                final = not chunk
                limit = len(buf) if final else max(0, len(buf) - overlap)
                pos = 0
                assert self._bytes is not None
                for match in self._bytes.finditer(buf):
                    if match.start() >= limit:
                        break
                    offsets.append((base + match.start(), self._mask(match.group(0), True)))
                    pos = match.end()
                cut = max(pos, limit)
                base += cut
                buf = buf[cut:]
                if final:
                    break
        with open(path, "r+b") as handle:
            for offset, mask in offsets:
                handle.seek(offset)
                handle.write(mask)
        return bool(offsets)

    def scrub_tree(self, root: Path, since: float | None = None) -> list[Path]:
        """Mask secrets in every regular file under `root` changed at or after `since` (ctime).

        Symlinks are never followed. Returns the files that held a secret."""
        changed: list[Path] = []
        if not self:
            return changed
        for directory, dirs, files in os.walk(root, followlinks=False):
            for name in files:
                path = Path(directory) / name
                try:
                    st = path.lstat()
                except OSError:
                    continue
                if not _is_regular(st.st_mode) or (since is not None and st.st_ctime < since and st.st_mtime < since):
                    continue
                try:
                    if self.mask_file_in_place(path):
                        changed.append(path)
                except OSError:
                    continue
        return changed


def _is_regular(mode: int) -> bool:
    import stat
    return stat.S_ISREG(mode)


class StreamRedactor:
    """Redacts a byte stream fed in chunks of any size, holding back as little as it can.

    What it holds back after each chunk is the longest tail of the stream so far that is a proper
    prefix of some secret variant (``...sk-an`` when a key starts ``sk-ant``), and nothing otherwise:
    ordinary output passes at once, while a secret split across chunks (one byte per chunk, if it
    comes that way) is held until it is complete and replaced, or until it turns out to be
    something else and is let through. The output equals `Redactor.redact_bytes` of the whole
    stream, whatever the chunking. The redactor is read on every chunk, so secrets registered after
    the stream started count from the next chunk on; with none registered a chunk costs two
    attribute reads. `flush` at the end of the stream lets the held tail out (it is no secret)."""

    def __init__(self, redactor: Redactor, same_length: bool = False) -> None:
        self.redactor = redactor
        self.same_length = same_length
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        if self.redactor._bytes is None and not self._held:
            return chunk
        return self._scan(self._held + chunk if self._held else chunk, final=False)

    def flush(self) -> bytes:
        return self._scan(self._held, final=True)

    @property
    def held(self) -> int:
        """Bytes held back, waiting for the next chunk to tell whether they start a secret."""
        return len(self._held)

    def _hold_from(self, buf: bytes) -> int:
        """The start of the longest tail of `buf` that is a proper prefix of a variant (else len(buf))."""
        redactor = self.redactor
        size = len(buf)
        lowest = max(0, size - redactor.longest + 1)
        first = size
        for byte in redactor._starts:  # the earliest place a variant could start and still be incomplete
            at = buf.find(byte, lowest)
            if 0 <= at < first:
                first = at
        if first == size:
            return size
        variants = redactor._bytes_variants  # checked in place: a set of every prefix grows with a secret's square
        for at in range(first, size):
            if buf[at] in redactor._starts:
                tail = buf[at:]
                if any(len(variant) > len(tail) and variant.startswith(tail) for variant in variants):
                    return at
        return size

    def _scan(self, buf: bytes, final: bool) -> bytes:
        redactor = self.redactor
        pattern = redactor._bytes
        if pattern is None:
            self._held = b""
            return buf
        # A match starting before `hold` is final: no later byte can make a longer variant match there
        # (buf[start:] would then be a proper prefix of it, and `hold` is the first such place).
        hold = len(buf) if final else self._hold_from(buf)
        if not redactor.contains(buf):
            self._held = buf[hold:]
            return buf[:hold]
        out = bytearray()
        pos = 0
        for match in pattern.finditer(buf):
            if match.start() >= hold:
                break
            out += buf[pos:match.start()]
            out += redactor._mask(match.group(0), self.same_length)
            pos = match.end()
        cut = max(pos, hold)
        out += buf[pos:cut]
        self._held = buf[cut:]
        return bytes(out)


# --------------------------------------------------------------------------------------------------
# the process-wide registry: every secret any agent of this engine may see


_REGISTRY = Redactor()


def register(secrets: Mapping[str, str]) -> None:
    """Make these values redacted from everything this process stores from now on."""
    _REGISTRY.add(secrets)


def registry() -> Redactor:
    return _REGISTRY


def redact_obj(obj: Any) -> Any:
    """`Redactor.redact_obj` with every registered secret (a no-op when there is none).

    Fast path: one JSON dump and one search (every variant a value can take inside a JSON string is
    searched for); the structure is walked only when a secret is in it."""
    if not _REGISTRY:
        return obj
    pattern = _REGISTRY._text
    try:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return _REGISTRY.redact_obj(obj)
    if pattern is None or not pattern.search(text):
        return obj
    return _REGISTRY.redact_obj(obj)


def redact_text(text: str) -> str:
    return _REGISTRY.redact_text(text) if _REGISTRY else text


def redact_files(*paths: Path) -> None:
    """Rewrite raw log files without the registered secrets (a no-op when there is none)."""
    if not _REGISTRY:
        return
    for path in paths:
        try:
            _REGISTRY.redact_file(Path(path))
        except OSError:
            pass


def scrub_attempt(attempt_dir: Path, since: float | None) -> list[Path]:
    """Remove every registered secret from what a crashed attempt left under `attempt_dir`.

    Its raw logs (``logs/``, text) are rewritten with ``[REDACTED:NAME]`` markers, line count kept;
    every other regular file under the attempt dir (the work dir: report, transcripts, HOME, the env
    it built) changed at or after `since` is masked in place, same length. The work is bounded by
    what the attempt wrote: older files, symlinks and special files are never read. Returns the files
    that held a secret (a no-op without registered secrets)."""
    changed: list[Path] = []
    if not _REGISTRY:
        return changed
    logs = Path(attempt_dir) / "logs"
    if logs.is_dir():
        for path in sorted(logs.iterdir()):
            try:
                if _is_regular(path.lstat().st_mode) and _REGISTRY.redact_file(path):
                    changed.append(path)
            except OSError:
                continue
    for entry in sorted(Path(attempt_dir).iterdir()) if Path(attempt_dir).is_dir() else []:
        if entry.name == "logs" or entry.is_symlink():
            continue
        if entry.is_dir():
            changed += _REGISTRY.scrub_tree(entry, since)
        elif entry.is_file():
            try:
                st = entry.lstat()
                if (since is None or max(st.st_ctime, st.st_mtime) >= since) and _REGISTRY.mask_file_in_place(entry):
                    changed.append(entry)
            except OSError:
                continue
    return changed


def reset_registry() -> None:
    """Forget every registered secret (tests)."""
    global _REGISTRY
    _REGISTRY = Redactor()


__all__ = [
    "AgentSecrets", "MIN_SECRET_CHARS", "Redactor", "StreamRedactor", "load_secrets", "parse_env_file",
    "redact_files", "redact_obj", "redact_text", "register", "registry", "reset_registry", "scrub_attempt",
]
