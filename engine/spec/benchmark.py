"""The whole spec, `Benchmark`: its sections, the rules across them, and lookups by name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field, PrivateAttr, Strict, ValidationInfo, field_validator, model_validator

from .agents import Agent, BaselineAgent, ClaudeCodeAgent, CodexAgent, CommandAgent
from .defaults import Defaults, TierTimeouts
from .fields import Name, SpecLookupError, SpecModel, TIERS, TIER_CODES, _Problem
from .hosts import Host, LocalHost, SshHost
from .repos import RepoTask, Suite


# --------------------------------------------------------------------------- benchmark
class Benchmark(SpecModel):
    version: Annotated[int, Strict()]
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: dict[Name, Host] = Field(default_factory=lambda: {"local": LocalHost(kind="local")})
    agents: dict[Name, Agent] = Field(default_factory=dict)
    suites: dict[Name, Suite] = Field(min_length=1)

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source_path: Path | None = PrivateAttr(default=None)

    _DEFAULT_REFS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("suite", "suites"), ("agent", "agents"), ("host", "hosts"),
    )

    @field_validator("version")
    @classmethod
    def _supported(cls, value: int) -> int:
        if value != 1:
            raise ValueError(f"unsupported version {value}: this resenv reads version 1")
        return value

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """defaults.suite / agent / host must name something defined in the file."""
        defaults = data.get("defaults", {})
        if isinstance(defaults, BaseModel):
            defaults = defaults.model_dump()
        if not isinstance(defaults, dict):
            return []
        problems = []
        for field, section in cls._DEFAULT_REFS:
            names = data[section] if section in data else cls.model_fields[section].get_default(
                call_default_factory=True)
            name = defaults.get(field, Defaults.model_fields[field].default)
            if not isinstance(names, dict) or not names or not isinstance(name, str):
                continue  # nothing to check against (a missing section is reported by itself)
            if name not in names:
                implicit = ("" if field in defaults
                            else f" (the built-in default; set defaults.{field})")
                known = ", ".join(sorted(map(str, names))) or "none"
                problems.append(_Problem(("defaults", field), f"default {field} {name!r} is not "
                                         f"defined{implicit}; known {section}: {known}"))
        return problems

    @model_validator(mode="after")
    def _remember_origin(self, info: ValidationInfo) -> Benchmark:
        context = info.context or {}
        if context.get("base_dir") is not None:
            self._base_dir = Path(context["base_dir"])
        if context.get("source_path") is not None:
            self._source_path = Path(context["source_path"])
        return self

    @property
    def base_dir(self) -> Path:
        """The folder of benchmark.yaml: relative paths in the spec start here."""
        return self._base_dir

    @property
    def source_path(self) -> Path | None:
        """The benchmark.yaml this was loaded from (None when built in code or from a snapshot)."""
        return self._source_path

    def snapshot(self) -> dict[str, Any]:
        """The spec as JSON-ready data: a resumed run uses the spec it began with."""
        return self.model_dump(mode="json")

    def suite(self, name: str | None = None) -> Suite:
        """The named suite (default: defaults.suite)."""
        return self._lookup("suite", self.suites, name or self.defaults.suite)

    def agent(self, name: str | None = None) -> CommandAgent | BaselineAgent | ClaudeCodeAgent | CodexAgent:
        """The named agent (default: defaults.agent)."""
        return self._lookup("agent", self.agents, name or self.defaults.agent)

    def host(self, name: str | None = None) -> LocalHost | SshHost:
        """The named host (default: defaults.host)."""
        return self._lookup("host", self.hosts, name or self.defaults.host)

    def tier_timeout(self, repo: RepoTask, tier: str) -> float:
        """Seconds for a tier ("C0".."C4" or cpu/single_gpu/multi_gpu) of one repo."""
        code = TIER_CODES.get(tier, tier)
        name = next((t for t, c in TIER_CODES.items() if c == code), None)
        entrypoint = getattr(repo.entrypoints, name) if name else None
        if entrypoint is not None and entrypoint.timeout is not None:
            return entrypoint.timeout
        try:
            return getattr(self.defaults.tier_timeouts, code)
        except AttributeError:
            raise SpecLookupError("tier", tier, [*TierTimeouts.model_fields, *TIERS]) from None

    @staticmethod
    def _lookup(what: str, table: Mapping[str, Any], name: str) -> Any:
        if name not in table:
            raise SpecLookupError(what, name, list(table))
        return table[name]
