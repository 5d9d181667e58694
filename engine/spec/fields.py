"""What every section of the spec is built from: the base model that reports every problem at once,
the templates commands are written in (`{python}`, `{repo}`...), names, and the checked scalar types.
"""

from __future__ import annotations

import datetime
import difflib
import math
import re
import shlex
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError


TEMPLATE_FIELDS: frozenset[str] = frozenset(
    {"python", "repo", "workdir", "env", "report", "gpus", "ngpus", "job", "run"}
)
"""Placeholders allowed in commands and env values: the reported interpreter, the repo checkout,
the job's work dir, the suggested env dir (workdir/env), the report.json path, the leased GPU ids
(comma-separated), their count, the job key and the run id."""

TIERS: tuple[str, ...] = ("cpu", "single_gpu", "multi_gpu")
"""The tiers a repo declares entrypoints for, in order."""

TIER_CODES: dict[str, str] = {"cpu": "C1", "single_gpu": "C3", "multi_gpu": "C4"}
"""Which protocol tier runs each entrypoint (C0, C2 and C5 need no entrypoint)."""

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")


# --------------------------------------------------------------------------- templates


class TemplateError(ValueError):
    """A template cannot be rendered (a placeholder has no value)."""


def _placeholders(template: str) -> list[tuple[str, str | None, str | None]]:
    """(name, conversion, format spec) of each placeholder; ValueError on unbalanced braces."""
    return [
        (name, conversion, spec)
        for _, name, spec, conversion in string.Formatter().parse(template)
        if name is not None
    ]


def _check_template(template: str) -> str:
    """Accept a template only if it parses and uses known placeholders, plainly."""
    hint = "write {{ and }} for literal braces"
    try:
        found = _placeholders(template)
    except ValueError as exc:
        raise ValueError(f"invalid template {template!r}: {exc} ({hint})") from None
    unknown = sorted({f"{{{name}}}" for name, _, _ in found if name not in TEMPLATE_FIELDS})
    if unknown:
        allowed = ", ".join(f"{{{name}}}" for name in sorted(TEMPLATE_FIELDS))
        raise ValueError(f"unknown placeholder {', '.join(unknown)}; allowed: {allowed} ({hint})")
    for name, conversion, spec in found:
        if conversion or spec:
            raise ValueError(f"placeholder {{{name}}} may not have a conversion or format spec")
    return template


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill a validated template; raise `TemplateError` naming a placeholder without a value."""
    parts: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is None:
            continue
        if name not in values:
            given = ", ".join(sorted(values)) or "none"
            raise TemplateError(
                f"{template!r} needs {{{name}}}, which has no value (given: {given})")
        parts.append(str(values[name]))
    return "".join(parts)


# --------------------------------------------------------------------------- scalar types


def _num(value: float) -> str:
    """-3.0 -> "-3": numbers in messages look like the user wrote them."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _above_zero(unit: str):
    def check(value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"expected {unit} > 0, got {_num(value)}")
        return value
    return check


def _at_least(minimum: int, unit: str = "an integer"):
    def check(value: int) -> int:
        if value < minimum:
            raise ValueError(f"expected {unit} >= {minimum}, got {value}")
        return value
    return check


def _non_negative(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a number >= 0, got {_num(value)}")
    return value


def _name(what: str):
    def check(value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError(f"invalid {what} {value!r}: use letters, digits, '.', '_' and '-', "
                             "starting with a letter or digit (it is used in file names)")
        return value
    return check


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(f"invalid environment variable name {value!r}")
    return value


def _date(value: Any) -> Any:
    """YAML gives dates as `date`; quoted ones arrive as text. Anything else is refused."""
    if isinstance(value, datetime.datetime) or not isinstance(value, (str, datetime.date)):
        raise ValueError(f"expected a date YYYY-MM-DD, got {value!r}")
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"expected a date YYYY-MM-DD, got {value!r}") from None
    return value


def _gpu_selection(value: Any) -> Literal["auto"] | int | tuple[int, ...]:
    """Host GPUs: "auto", a count, or explicit unique ids (one readable error, not three)."""
    expected = "expected 'auto', a GPU count >= 0, or a list of unique GPU ids"
    if value == "auto" and isinstance(value, str):
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{expected}, got {value}")
        return value
    if isinstance(value, (list, tuple)):
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
            raise ValueError(f"{expected}; the list has an entry that is not an id >= 0")
        repeated = sorted({i for i in value if list(value).count(i) > 1})
        if repeated:
            raise ValueError(f"duplicate GPU id(s): {', '.join(map(str, repeated))}")
        return tuple(value)
    raise ValueError(f"{expected}, got {value!r}")


StrictText = Annotated[str, Strict()]
Text = Annotated[str, Strict(), AfterValidator(_non_empty)]


def _host_dir(value: str) -> str:
    """A folder on a remote host: absolute, one line (its shell and its facts read it as such)."""
    if not value.strip():
        raise ValueError("expected an absolute path on the host, got an empty value")
    if not value.startswith("/"):
        raise ValueError(f"expected an absolute path on the host (it starts with /), got {value!r}")
    if any(char in value for char in "\n\r\x00"):
        raise ValueError(f"expected a path on one line, got {value!r}")
    return value.rstrip("/") or "/"


HostDir = Annotated[str, Strict(), AfterValidator(_host_dir)]
Seconds = Annotated[float, Strict(), AfterValidator(_above_zero("seconds"))]
PositiveNumber = Annotated[float, Strict(), AfterValidator(_above_zero("a number"))]
NonNegativeNumber = Annotated[float, Strict(), AfterValidator(_non_negative)]
PositiveInt = Annotated[int, Strict(), AfterValidator(_at_least(1))]
NonNegativeInt = Annotated[int, Strict(), AfterValidator(_at_least(0))]
Name = Annotated[str, Strict(), AfterValidator(_name("name"))]
RepoId = Annotated[str, Strict(), AfterValidator(_name("repo id"))]
TemplateText = Annotated[str, Strict(), AfterValidator(_check_template)]
Env = dict[Annotated[str, Strict(), AfterValidator(_env_name)], TemplateText]
PriceDate = Annotated[datetime.date, BeforeValidator(_date)]
GpuSelection = Annotated[
    Union[Literal["auto"], int, tuple[int, ...]], BeforeValidator(_gpu_selection)
]


def _command_form(value: Any) -> str | None:
    if isinstance(value, str):
        return "shell"
    if isinstance(value, (list, tuple)):
        return "argv"
    return None


Command = Annotated[
    Union[
        Annotated[Annotated[TemplateText, AfterValidator(_non_empty)], Tag("shell")],
        Annotated[tuple[TemplateText, ...], Field(min_length=1), Tag("argv")],
    ],
    Discriminator(
        _command_form,
        custom_error_type="command_type",
        custom_error_message="expected a command: a string (run through sh -c) "
        "or a list of strings (an argv)",
    ),
]


# --------------------------------------------------------------------------- LLM agents: prompt templates and secret names
PROMPT_FIELDS: frozenset[str] = frozenset({"schema"})
"""Placeholders a prompt may use beyond TEMPLATE_FIELDS: {schema}, the report's fields."""


def _check_prompt(template: str) -> str:
    hint = "write {{ and }} for literal braces"
    try:
        found = _placeholders(template)
    except ValueError as exc:
        raise ValueError(f"invalid prompt template: {exc} ({hint})") from None
    allowed = TEMPLATE_FIELDS | PROMPT_FIELDS
    unknown = sorted({f"{{{name}}}" for name, _, _ in found if name not in allowed})
    if unknown:
        names = ", ".join(f"{{{name}}}" for name in sorted(allowed))
        raise ValueError(f"unknown placeholder {', '.join(unknown)} in prompt; allowed: {names} ({hint})")
    return template


PromptText = Annotated[str, Strict(), AfterValidator(_non_empty), AfterValidator(_check_prompt)]
EnvName = Annotated[str, Strict(), AfterValidator(_env_name)]


# --------------------------------------------------------------------------- base model


@dataclass(frozen=True)
class _Problem:
    """A rule broken inside a model, at `where` (a data path relative to that model)."""

    where: tuple[Any, ...]
    message: str

    def as_error(self, data: Any) -> InitErrorDetails:
        return InitErrorDetails(
            type=PydanticCustomError("spec_rule", self.message), loc=self.where, input=data
        )


def _rewrap(error: Mapping[str, Any]) -> InitErrorDetails:
    """Carry a pydantic error through our re-raise, keeping its type, message and place."""
    return InitErrorDetails(
        type=PydanticCustomError(error["type"], error["msg"]),
        loc=tuple(error["loc"]),
        input=error.get("input"),
    )


class SpecModel(BaseModel):
    """Base of every spec model: frozen, unknown keys refused, every problem reported at once.

    Pydantic stops at a model's own (cross-field) rules when one of its fields is invalid, so
    those rules are written as `_rules` over the raw input and always run; their problems are
    raised together with the field errors. Unknown keys get a message that lists the known ones.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """Cross-field rules over the raw mapping; override. Must tolerate ill-typed input."""
        return []

    @classmethod
    def _unknown_keys(cls, data: dict[Any, Any]) -> list[_Problem]:
        known = list(cls.model_fields)
        problems = []
        for key in data:
            if key in cls.model_fields:
                continue
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(_Problem((key,), f"unknown key {key!r}{hint}; "
                                             f"expected one of: {', '.join(known)}"))
        return problems

    @model_validator(mode="wrap")
    @classmethod
    def _validate_everything(cls, data: Any, handler: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        problems = cls._unknown_keys(data) + cls._rules(data, info.context)
        try:
            model = handler({k: v for k, v in data.items() if k in cls.model_fields})
        except ValidationError as exc:
            errors = [_rewrap(error) for error in exc.errors()]
        else:
            if not problems:
                return model
            errors = []
        errors += [problem.as_error(data) for problem in problems]
        raise ValidationError.from_exception_data(cls.__name__, errors)


def _present(section: Any) -> set[Any] | None:
    """Keys set (not null) in a raw mapping or a model; None when the type is wrong."""
    if section is None:
        return set()
    if isinstance(section, dict):
        return {key for key, value in section.items() if value is not None}
    if isinstance(section, BaseModel):
        return {name for name in type(section).model_fields if getattr(section, name) is not None}
    return None


# --------------------------------------------------------------------------- hosts and agents


def _kind_tag(value: Any) -> str | None:
    """Tags are "kind=<kind>" so they can never be mistaken for a data key in error paths."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return f"kind={kind}" if isinstance(kind, str) else None




class Runnable(SpecModel):
    """A command template plus env templates, rendered for one job."""

    command: Command
    env: Env = Field(default_factory=dict)

    def argv(self, values: Mapping[str, str]) -> list[str]:
        """The argv to execute: a list renders item by item, a string via /bin/sh -c (quoted). The shell
        is named by its path: probes put the agent's bin dir first on PATH, and an `sh` there is the
        agent's, not the judge's."""
        if isinstance(self.command, str):
            quoted = {key: shlex.quote(str(value)) for key, value in values.items()}
            return ["/bin/sh", "-c", render(self.command, quoted)]
        return [render(arg, values) for arg in self.command]

    def render_env(self, values: Mapping[str, str]) -> dict[str, str]:
        return {name: render(value, values) for name, value in self.env.items()}



class SpecLookupError(KeyError):
    """A name that the benchmark does not define; the message lists the names it does."""

    def __init__(self, what: str, name: str, known: Sequence[str]):
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(f"unknown {what} {name!r}; known: {listed}")
        self.what, self.name, self.known = what, name, list(known)

    def __str__(self) -> str:
        return str(self.args[0])
