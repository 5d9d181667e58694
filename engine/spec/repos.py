"""The spec's `suites:` section: repos (their source, entrypoints per tier, pinned assets) grouped
into suites.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, Discriminator, Field, Strict, Tag, ValidationInfo, field_validator

from .fields import (
    NonNegativeInt,
    PositiveInt,
    RepoId,
    Runnable,
    Seconds,
    SpecLookupError,
    SpecModel,
    StrictText,
    TIERS,
    TIER_CODES,
    Text,
    _COMMIT,
    _Problem,
    _kind_tag,
    _non_empty,
    _present,
)


# --------------------------------------------------------------------------- repos


class LocalSource(SpecModel):
    """A directory bundled with the benchmark (relative paths are from the yaml's folder)."""

    path: Text

    @field_validator("path")
    @classmethod
    def _exists(cls, value: str, info: ValidationInfo) -> str:
        context = info.context or {}
        base_dir = context.get("base_dir")
        if base_dir is None or not context.get("check_paths", True):
            return value  # built in code, or restored from a snapshot: nothing to look at
        where = Path(base_dir) / value
        if not where.exists():
            raise ValueError(f"local source path {value!r} does not exist (looked at {where})")
        if not where.is_dir():
            raise ValueError(f"local source path {value!r} is not a directory ({where})")
        return value

    def resolve(self, base_dir: Path) -> Path:
        return (Path(base_dir) / self.path).absolute()


class GitSource(SpecModel):
    """A repository pinned to a full commit sha (a branch or short sha could move)."""

    git: Text
    commit: StrictText

    @field_validator("commit")
    @classmethod
    def _full_sha(cls, value: str) -> str:
        if not _COMMIT.match(value):
            raise ValueError(f"expected a full 40-hex commit sha, got {value!r}")
        return value.lower()


def _source_form(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        return {LocalSource: "local source", GitSource: "git source"}.get(type(value))
    if not isinstance(value, dict) or ("path" in value) == ("git" in value):
        return None
    return "local source" if "path" in value else "git source"


Source = Annotated[
    Union[Annotated[LocalSource, Tag("local source")], Annotated[GitSource, Tag("git source")]],
    Discriminator(_source_form, custom_error_type="source_form",
                  custom_error_message="expected exactly one of {path: <directory>} "
                  "or {git: <url>, commit: <40-hex sha>}"),
]


class Entrypoint(Runnable):
    """How to run one tier of a repo: in the repo checkout, on `gpus` leased GPUs."""

    timeout: Seconds | None = None
    gpus: NonNegativeInt = 0


class CpuEntrypoint(Entrypoint):
    gpus: NonNegativeInt = 0

    @field_validator("gpus")
    @classmethod
    def _none(cls, value: int) -> int:
        if value != 0:
            raise ValueError(f"the cpu tier runs with GPUs hidden: gpus must be 0, got {value}")
        return value


class SingleGpuEntrypoint(Entrypoint):
    gpus: NonNegativeInt = 1

    @field_validator("gpus")
    @classmethod
    def _one(cls, value: int) -> int:
        if value != 1:
            raise ValueError(f"the single_gpu tier runs on one GPU: gpus must be 1, got {value}")
        return value


class MultiGpuEntrypoint(Entrypoint):
    gpus: NonNegativeInt = 2

    @field_validator("gpus")
    @classmethod
    def _several(cls, value: int) -> int:
        if value < 2:
            raise ValueError(f"the multi_gpu tier needs gpus >= 2, got {value}")
        return value


class Entrypoints(SpecModel):
    cpu: CpuEntrypoint | None = None
    single_gpu: SingleGpuEntrypoint | None = None
    multi_gpu: MultiGpuEntrypoint | None = None


class NotApplicable(SpecModel):
    """Tiers that do not apply to a repo, each with the reason why."""

    cpu: Text | None = None
    single_gpu: Text | None = None
    multi_gpu: Text | None = None


# --------------------------------------------------------------------------- repo assets (weights and data, pinned)
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


def _relative_path(value: str) -> str:
    if value.startswith("/") or ".." in Path(value).parts:
        raise ValueError(f"expected a path relative to the repo checkout, got {value!r}")
    return value


RelativePath = Annotated[str, Strict(), AfterValidator(_non_empty), AfterValidator(_relative_path)]


class HfAsset(SpecModel):
    """A Hugging Face Hub repo (model or dataset) at a pinned revision (a full 40-hex commit)."""

    kind: Literal["hf"]
    repo: Text                        # e.g. depth-anything/Depth-Anything-V2-Small
    repo_type: Literal["model", "dataset", "space"] = "model"
    revision: StrictText
    size: PositiveInt                 # bytes, for the plan and disk checks
    files: tuple[Text, ...] = ()      # only these files (default: the whole repo)
    dest: RelativePath | None = None  # where in the checkout it goes (default: the HF cache)

    @field_validator("revision")
    @classmethod
    def _full_sha(cls, value: str) -> str:
        if not _COMMIT.match(value):
            raise ValueError(f"expected a full 40-hex revision sha, got {value!r}")
        return value.lower()

    def label(self) -> str:
        return f"hf:{self.repo}@{self.revision[:12]} ({_size(self.size)})"


class UrlAsset(SpecModel):
    """One file from a URL, checked by its sha256."""

    kind: Literal["url"]
    url: Text
    sha256: StrictText
    size: PositiveInt
    dest: RelativePath | None = None

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not _SHA256.match(value):
            raise ValueError(f"expected a 64-hex sha256, got {value!r}")
        return value.lower()

    def label(self) -> str:
        return f"url:{self.url} ({_size(self.size)})"


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


Asset = Annotated[
    Union[Annotated[HfAsset, Tag("kind=hf")], Annotated[UrlAsset, Tag("kind=url")]],
    Discriminator(_kind_tag, custom_error_type="unknown_kind",
                  custom_error_message="known asset kinds: hf, url"),
]


class RepoTask(SpecModel):
    id: RepoId
    source: Source
    category: Text = "uncategorized"
    entrypoints: Entrypoints = Field(default_factory=Entrypoints)
    not_applicable: NotApplicable = Field(default_factory=NotApplicable)
    assets: tuple[Asset, ...] = ()  # weights/data the entrypoints need, pinned
    # Assets an entrypoint is known to need that are not pinned yet (a hub repo or a URL, named for the
    # record): nothing fetches them, and the plan names them so that no one reads "none declared" as
    # "none needed". Pinning one (`resenv assets pin`) moves it to `assets:`.
    unpinned_assets: tuple[Text, ...] = ()

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """Each tier is either runnable or excused, never both and never neither."""
        runnable = _present(data.get("entrypoints"))
        excused = _present(data.get("not_applicable"))
        if runnable is None or excused is None:
            return []  # a type error that pydantic reports
        problems = [
            _Problem(("not_applicable", tier), f"tier {tier} is both in entrypoints and "
                     "not_applicable; keep only one")
            for tier in TIERS if tier in runnable and tier in excused
        ]
        missing = [tier for tier in TIERS if tier not in runnable and tier not in excused]
        if missing:
            where = ("entrypoints",) if "entrypoints" in data else ()
            tiers = (f"tier {missing[0]} is" if len(missing) == 1
                     else f"tiers {', '.join(missing)} are")
            problems.append(_Problem(where, f"{tiers} in neither entrypoints nor not_applicable; "
                                     "give each an entrypoint or a reason "
                                     f'(e.g. not_applicable: {{{missing[0]}: "<reason>"}})'))
        return problems

    def tiers(self) -> dict[str, Entrypoint | str]:
        """Tier name -> its entrypoint, or the reason it does not apply."""
        return {
            tier: getattr(self.entrypoints, tier) or getattr(self.not_applicable, tier)
            for tier in TIERS
        }

    def gpus_needed(self, tiers: Iterable[str] = ("C0", "C1", "C2", "C3", "C4", "C5")) -> int:
        """GPUs a job of this repo leases: the most any entrypoint of the selected `tiers` uses (the
        agent works with them too), and at least one when C2 is judged, since C2 applies to every repo
        (the paper's denominator is all 44): the framework must see a GPU even where the repo runs on
        CPU only. Tiers that are not selected lease nothing: `C0,C1,C5` needs no GPU."""
        tiers = set(tiers)
        needs = [ep.gpus for tier, ep in self.tiers().items()
                 if isinstance(ep, Entrypoint) and TIER_CODES[tier] in tiers]
        if "C2" in tiers:
            needs.append(1)
        return max(needs, default=0)


class Suite(SpecModel):
    description: StrictText | None = None
    repos: tuple[RepoTask, ...] = Field(min_length=1)

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """Repo ids name files and rows, so they are unique within a suite."""
        repos = data.get("repos")
        if not isinstance(repos, (list, tuple)):
            return []
        first: dict[str, int] = {}
        problems = []
        for index, repo in enumerate(repos):
            rid = repo.get("id") if isinstance(repo, dict) else getattr(repo, "id", None)
            if not isinstance(rid, str):
                continue
            if rid in first:
                problems.append(_Problem(("repos", index, "id"), f"duplicate repo id {rid!r} "
                                         f"(already used by repos[{first[rid]}])"))
            else:
                first[rid] = index
        return problems

    def repo(self, repo_id: str) -> RepoTask:
        for repo in self.repos:
            if repo.id == repo_id:
                return repo
        raise SpecLookupError("repo", repo_id, [repo.id for repo in self.repos])
