"""benchmark.yaml -> typed spec: the shipped catalog loads, and every bad input is reported with
its exact line, field path and a readable message (all problems at once, not only the first)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from resenv.engine.spec import (
    TEMPLATE_FIELDS,
    Benchmark,
    CpuEntrypoint,
    Entrypoint,
    SpecError,
    SpecIssue,
    SpecLookupError,
    TemplateError,
    benchmark_from_snapshot,
    format_issues,
    load_benchmark,
    loads_benchmark,
    render,
)
from resenv.engine.spec.yamlsource import load_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]

# A small valid benchmark; tests edit one line of it at a time. Its line numbers:
#  1 version  2 defaults  5 agents  6 a  7 kind  8 command  9 suites  10 s  11 repos
# 12 - id    13 source    14 entrypoints  15 cpu  16 not_applicable
VALID = """\
version: 1
defaults:
  suite: s
  agent: a
agents:
  a:
    kind: command
    command: ["true"]
suites:
  s:
    repos:
      - id: r1
        source: {path: repo}
        entrypoints:
          cpu: {command: "{python} main.py", timeout: 60}
        not_applicable: {single_gpu: "no GPU code path", multi_gpu: "no GPU code path"}
"""

REPO = "suites.s.repos[0]"


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "repo").mkdir(exist_ok=True)
    path = tmp_path / "benchmark.yaml"
    path.write_text(text)
    return path


def issues_of(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    """(line, path, message) of every issue that loading `text` reports."""
    with pytest.raises(SpecError) as caught:
        load_benchmark(write(tmp_path, text))
    return [(issue.line, issue.path, issue.message) for issue in caught.value.issues]


def edit(old: str, new: str, text: str = VALID) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def line_of(text: str, needle: str) -> int:
    """1-based number of the only line containing `needle`."""
    hits = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


# --------------------------------------------------------------------------- the shipped catalog


def test_shipped_benchmark_validates() -> None:
    bench = load_benchmark(REPO_ROOT / "benchmark.yaml")

    assert bench.version == 1
    assert bench.base_dir == REPO_ROOT
    assert (bench.defaults.suite, bench.defaults.agent, bench.defaults.host) == (
        "starter", "baseline", "local")
    starter = bench.suite()
    assert [repo.id for repo in starter.repos] == [
        "tiny-stdlib", "tiny-numpy", "undeclared-dep", "c-extension", "numpy-v1-api",
        "src-layout-extra", "torch-ddp"]
    for repo in starter.repos:
        tiers = repo.tiers()
        assert isinstance(tiers["cpu"], CpuEntrypoint)
        folder = repo.source.resolve(bench.base_dir)
        assert "README.md" in {p.name for p in folder.iterdir()}
        if repo.id == "torch-ddp":
            assert isinstance(tiers["single_gpu"], Entrypoint) and isinstance(tiers["multi_gpu"], Entrypoint)
            assert repo.gpus_needed() == 2
            # only the selected tiers lease: none of C0, C1, C5 needs a GPU; C3 one; C4 its two
            assert [repo.gpus_needed(tiers) for tiers in (("C0", "C1", "C5"), ("C3",), ("C1", "C3", "C4"))] == [0, 1, 2]
            continue
        assert tiers["single_gpu"] == tiers["multi_gpu"] == "no GPU code path"
        assert repo.gpus_needed(("C0", "C1", "C5")) == 0
        assert repo.gpus_needed() == 1, "C2 applies to every repo: judged on a GPU"
    for repo_id in ("tiny-stdlib", "tiny-numpy"):
        folder = starter.repo(repo_id).source.resolve(bench.base_dir)
        assert {"README.md", "requirements.txt", "main.py"} <= {p.name for p in folder.iterdir()}
    assert "numpy" in (REPO_ROOT / "suites/starter/tiny-numpy/requirements.txt").read_text()
    assert bench.agent("venv-pip").kind == bench.agent("noop").kind == "command"
    assert bench.agent("baseline").kind == "baseline"
    assert bench.agent("noop").argv({}) == ["true"]
    assert bench.host().kind == "local"


def run_entrypoint(bench: Benchmark, repo_id: str, python: str) -> subprocess.CompletedProcess:
    repo = bench.suite("starter").repo(repo_id)
    argv = repo.entrypoints.cpu.argv({"python": python})
    return subprocess.run(argv, cwd=repo.source.resolve(bench.base_dir), capture_output=True,
                          text=True, timeout=bench.tier_timeout(repo, "C1"))


def test_tiny_stdlib_runs_and_checks_itself() -> None:
    result = run_entrypoint(load_benchmark(REPO_ROOT / "benchmark.yaml"), "tiny-stdlib",
                            sys.executable)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK: 664579 primes")


def test_tiny_numpy_runs_only_where_numpy_is_installed() -> None:
    result = run_entrypoint(load_benchmark(REPO_ROOT / "benchmark.yaml"), "tiny-numpy",
                            sys.executable)
    if importlib.util.find_spec("numpy") is not None:
        assert result.returncode == 0, result.stderr
        assert "OK: 4 systems solved" in result.stdout
    else:  # the failure the benchmark expects from an env without the repo's requirements
        assert result.returncode != 0
        assert "No module named 'numpy'" in result.stderr


def test_venv_pip_agent_builds_an_env_and_reports_it(tmp_path: Path) -> None:
    bench = load_benchmark(REPO_ROOT / "benchmark.yaml")
    repo = bench.suite().repo("tiny-stdlib")
    values = {"env": str(tmp_path / "env"), "repo": str(repo.source.resolve(bench.base_dir)),
              "report": str(tmp_path / "report.json"), "workdir": str(tmp_path)}
    agent = bench.agent("venv-pip")

    done = subprocess.run(agent.argv(values), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)

    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {"python_path": f"{tmp_path}/env/bin/python"}
    assert run_entrypoint(bench, "tiny-stdlib", report["python_path"]).returncode == 0


# --------------------------------------------------------------------------- one error at a time


def test_valid_example_loads(tmp_path: Path) -> None:
    bench = load_benchmark(write(tmp_path, VALID))
    repo = bench.suite("s").repo("r1")
    assert bench.base_dir == tmp_path
    assert repo.entrypoints.cpu.timeout == 60
    assert repo.source.resolve(bench.base_dir) == tmp_path / "repo"


def test_negative_timeout(tmp_path: Path) -> None:
    text = edit("timeout: 60", "timeout: -3")
    assert issues_of(tmp_path, text) == [
        (15, f"{REPO}.entrypoints.cpu.timeout", "expected seconds > 0, got -3")]


def test_issue_prints_as_file_line_path_message(tmp_path: Path, monkeypatch) -> None:
    write(tmp_path, edit("timeout: 60", "timeout: -3"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as caught:
        load_benchmark(Path("benchmark.yaml"))
    expected = ("benchmark.yaml:15: suites.s.repos[0].entrypoints.cpu.timeout: "
                "expected seconds > 0, got -3")
    assert [str(issue) for issue in caught.value.issues] == [expected]
    assert str(caught.value) == expected


def test_phase_timeout_zero_and_tier_timeout_float(tmp_path: Path) -> None:
    text = edit("  agent: a\n", "  agent: a\n  timeouts: {agent: 0}\n"
                "  tier_timeouts: {C2: 0.5}\n")
    assert issues_of(tmp_path, text) == [(5, "defaults.timeouts.agent", "expected seconds > 0, got 0")]


def test_output_budget_defaults_and_settings(tmp_path: Path) -> None:
    bench = load_benchmark(write(tmp_path, VALID))
    assert (bench.defaults.output.head_bytes, bench.defaults.output.tail_bytes) == (4 * 2**20, 256 * 2**10)
    bench = load_benchmark(write(tmp_path, edit("  agent: a\n", "  agent: a\n  output: {head_bytes: 65536, tail_bytes: 0}\n")))
    assert (bench.defaults.output.head_bytes, bench.defaults.output.tail_bytes) == (65536, 0)
    [(line, path, _)] = issues_of(tmp_path, edit("  agent: a\n", "  agent: a\n  output: {head_bytes: -1}\n"))
    assert (line, path) == (5, "defaults.output.head_bytes")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    text = VALID + "extras: 1\n"
    [(line, path, message)] = issues_of(tmp_path, text)
    assert (line, path) == (17, "extras")
    assert message.startswith("unknown key 'extras'; expected one of: version, defaults,")


def test_unknown_nested_key_is_reported_at_the_key_with_a_suggestion(tmp_path: Path) -> None:
    text = edit("timeout: 60}", "timeout: 60,\n              timout: 5}")
    assert issues_of(tmp_path, text) == [(
        16, f"{REPO}.entrypoints.cpu.timout",
        "unknown key 'timout' (did you mean 'timeout'?); expected one of: command, env, timeout, gpus",
    )]


def test_unknown_tier_name(tmp_path: Path) -> None:
    text = edit("          cpu:", "          gpu: {command: x}\n          cpu:")
    [(line, path, message)] = issues_of(tmp_path, text)
    assert (line, path) == (15, f"{REPO}.entrypoints.gpu")
    assert "expected one of: cpu, single_gpu, multi_gpu" in message


@pytest.mark.parametrize(("old", "new", "path", "message"), [
    ("timeout: 60", 'timeout: "soon"', f"{REPO}.entrypoints.cpu.timeout",
     "expected a number, got 'soon'"),
    ("timeout: 60", "timeout: yes", f"{REPO}.entrypoints.cpu.timeout",
     "expected a number, got true"),
    ("id: r1", "id: 12", f"{REPO}.id", "expected a string, got 12"),
    ("source: {path: repo}", "source: repo", f"{REPO}.source",
     "expected exactly one of {path: <directory>} or {git: <url>, commit: <40-hex sha>}"),
    ('command: ["true"]', "command: 5", "agents.a.command",
     "expected a command: a string (run through sh -c) or a list of strings (an argv)"),
    ('command: ["true"]', 'command: ["true", 3]', "agents.a.command[1]", "expected a string, got 3"),
    ("    repos:\n", "    repos: {}\n", "suites.s.repos", "expected a list, got a mapping"),
])
def test_wrong_type(tmp_path: Path, old: str, new: str, path: str, message: str) -> None:
    text = edit(old, new)
    if old == "    repos:\n":  # turn the list that followed into a separate, unknown suite key
        text = text.split("    repos: {}\n")[0] + "    repos: {}\n"
    assert issues_of(tmp_path, text) == [(line_of(text, new.strip().splitlines()[0]), path, message)]


def test_missing_required_fields(tmp_path: Path) -> None:
    text = edit("version: 1\n", "").replace("        source: {path: repo}\n", "")
    assert issues_of(tmp_path, text) == [
        (1, "version", "required field is missing"),
        (11, f"{REPO}.source", "required field is missing"),
    ]


def test_missing_entrypoint_command_points_at_the_tier(tmp_path: Path) -> None:
    text = edit('cpu: {command: "{python} main.py", timeout: 60}', "cpu:\n            timeout: 60")
    assert issues_of(tmp_path, text) == [
        (15, f"{REPO}.entrypoints.cpu.command", "required field is missing")]


def test_tier_both_applicable_and_not_applicable(tmp_path: Path) -> None:
    text = edit("{single_gpu:", '{cpu: "why", single_gpu:')
    assert issues_of(tmp_path, text) == [(
        16, f"{REPO}.not_applicable.cpu",
        "tier cpu is both in entrypoints and not_applicable; keep only one")]


def test_tier_neither_applicable_nor_not_applicable(tmp_path: Path) -> None:
    text = edit(', multi_gpu: "no GPU code path"', "")
    [(line, path, message)] = issues_of(tmp_path, text)
    assert (line, path) == (14, f"{REPO}.entrypoints")
    assert message.startswith("tier multi_gpu is in neither entrypoints nor not_applicable")


def test_empty_not_applicable_reason(tmp_path: Path) -> None:
    text = edit('multi_gpu: "no GPU code path"', 'multi_gpu: " "')
    assert issues_of(tmp_path, text) == [(16, f"{REPO}.not_applicable.multi_gpu", "must not be empty")]


@pytest.mark.parametrize(("tier", "gpus", "message"), [
    ("cpu", 1, "the cpu tier runs with GPUs hidden: gpus must be 0, got 1"),
    ("single_gpu", 2, "the single_gpu tier runs on one GPU: gpus must be 1, got 2"),
    ("multi_gpu", 1, "the multi_gpu tier needs gpus >= 2, got 1"),
])
def test_gpus_per_tier(tmp_path: Path, tier: str, gpus: int, message: str) -> None:
    text = edit("          cpu: {", f"          {tier}: {{gpus: {gpus}, ")
    text = text.replace(f"{tier}: \"no GPU code path\"", 'cpu: "none"')
    assert issues_of(tmp_path, text) == [(15, f"{REPO}.entrypoints.{tier}.gpus", message)]


def test_local_path_must_exist_and_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    text = edit("{path: repo}", "{path: nowhere}")
    assert issues_of(tmp_path, text) == [(
        13, f"{REPO}.source.path",
        f"local source path 'nowhere' does not exist (looked at {tmp_path / 'nowhere'})")]
    text = edit("{path: repo}", "{path: a-file}")
    assert issues_of(tmp_path, text) == [(
        13, f"{REPO}.source.path",
        f"local source path 'a-file' is not a directory ({tmp_path / 'a-file'})")]


def test_git_source_needs_a_full_commit(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789ABCDEF01234567"
    good = edit("{path: repo}", f'{{git: "https://example.org/x.git", commit: "{sha}"}}')
    assert load_benchmark(write(tmp_path, good)).suite("s").repos[0].source.commit == sha.lower()

    bad = edit("{path: repo}", '{git: "https://example.org/x.git", commit: "main"}')
    assert issues_of(tmp_path, bad) == [
        (13, f"{REPO}.source.commit", "expected a full 40-hex commit sha, got 'main'")]
    missing = edit("{path: repo}", '{git: "https://example.org/x.git"}')
    assert issues_of(tmp_path, missing) == [(13, f"{REPO}.source.commit", "required field is missing")]


def test_source_with_both_forms(tmp_path: Path) -> None:
    text = edit("{path: repo}", "{path: repo, git: x}")
    assert issues_of(tmp_path, text) == [(13, f"{REPO}.source", "expected exactly one of "
                                          "{path: <directory>} or {git: <url>, commit: <40-hex sha>}")]


def test_duplicate_repo_id(tmp_path: Path) -> None:
    repo = VALID[VALID.index("      - id: r1"):]
    text = VALID + repo.replace("id: r1", "id: r2") + repo
    assert issues_of(tmp_path, text) == [
        (22, "suites.s.repos[2].id", "duplicate repo id 'r1' (already used by repos[0])")]


@pytest.mark.parametrize("bad", ["has space", "-dash-first", "a/b", "..", ""])
def test_repo_id_must_be_usable_in_file_names(tmp_path: Path, bad: str) -> None:
    [(line, path, message)] = issues_of(tmp_path, edit("id: r1", f'id: "{bad}"'))
    assert (line, path) == (12, f"{REPO}.id")
    assert message.startswith(f"invalid repo id {bad!r}")


def test_bad_agent_name_points_at_the_key(tmp_path: Path) -> None:
    text = edit("  a:\n", "  a:\n    kind: command\n    command: x\n  'my agent':\n")
    [(line, path, message)] = issues_of(tmp_path, text)
    assert (line, path) == (9, "agents['my agent']")
    assert message.startswith("invalid name 'my agent'")


def test_unknown_agent_kind(tmp_path: Path) -> None:
    assert issues_of(tmp_path, edit("kind: command", "kind: robot")) == [
        (7, "agents.a.kind", "unknown kind 'robot'; known agent kinds: command, baseline, claude-code, codex")]


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    text = edit("          cpu:", "          cpu: {command: x}\n          cpu:")
    assert issues_of(tmp_path, text) == [
        (16, f"{REPO}.entrypoints.cpu", "duplicate key 'cpu' (first defined on line 15)")]


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    text = edit("id: r1", "id: r1: x")  # a second ': ' on one line
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_benchmark(path)
    [issue] = caught.value.issues
    assert (issue.line, issue.column, issue.path) == (12, 15, "")
    assert str(issue) == f"{path}:12:15: YAML syntax error: mapping values are not allowed here"

    unclosed = edit("timeout: 60}", "timeout: 60")
    with pytest.raises(SpecError) as caught:
        load_benchmark(write(tmp_path, unclosed))
    [issue] = caught.value.issues
    assert (issue.line, issue.column) == (16, 23)  # where the parser gave up
    assert "while parsing a flow mapping at line 15" in issue.message


def test_unknown_template_placeholder(tmp_path: Path) -> None:
    text = edit('"{python} main.py"', '"{python} main.py --out {output}"')
    [(line, path, message)] = issues_of(tmp_path, text)
    assert (line, path) == (15, f"{REPO}.entrypoints.cpu.command")
    allowed = ", ".join(f"{{{name}}}" for name in sorted(TEMPLATE_FIELDS))
    assert message == (f"unknown placeholder {{output}}; allowed: {allowed} "
                       "(write {{ and }} for literal braces)")


def test_template_errors_in_argv_items_and_env(tmp_path: Path) -> None:
    text = edit('command: ["true"]', 'command: ["sh", "-c", "echo {job} {nope}"]\n'
                '    env: {A: "{gpus}", B: "{0}", C: "x}"}')
    problems = issues_of(tmp_path, text)
    assert [(line, path) for line, path, _ in problems] == [
        (8, "agents.a.command[2]"), (9, "agents.a.env.B"), (9, "agents.a.env.C")]
    assert problems[0][2].startswith("unknown placeholder {nope};")
    assert problems[1][2].startswith("unknown placeholder {0};")
    assert problems[2][2].startswith("invalid template 'x}'")


def test_escaped_braces_are_fine(tmp_path: Path) -> None:
    text = edit('"{python} main.py"', "\"awk '{{print $1}}' {repo}/x\"")
    bench = load_benchmark(write(tmp_path, text))
    entry = bench.suite("s").repo("r1").entrypoints.cpu
    assert entry.argv({"repo": "/r"}) == ["/bin/sh", "-c", "awk '{print $1}' /r/x"]


def test_defaults_must_name_defined_things(tmp_path: Path) -> None:
    text = edit("  agent: a\n", "  agent: b\n  host: gpu-box\n")
    assert issues_of(tmp_path, text) == [
        (4, "defaults.agent", "default agent 'b' is not defined; known agents: a"),
        (5, "defaults.host", "default host 'gpu-box' is not defined; known hosts: local"),
    ]


def test_host_gpus(tmp_path: Path) -> None:
    text = VALID + "hosts:\n  local: {kind: local, gpus: [0, 1, 1]}\n  two: {kind: local, gpus: 2}\n"
    assert issues_of(tmp_path, text) == [(18, "hosts.local.gpus", "duplicate GPU id(s): 1")]
    text = VALID + "hosts:\n  local: {kind: local, gpus: [0, 1], slots: 0}\n"
    bench_issues = issues_of(tmp_path, text)
    assert bench_issues == [(18, "hosts.local.slots", "expected an integer >= 1, got 0")]


def test_prices(tmp_path: Path) -> None:
    text = edit("  agent: a\n", "  agent: a\n  prices:\n    gpt-5.1: {input: 1.25, cached_input: "
                "0.125, cache_write: 0, output: 10, date: 2025-11-13}\n")
    price = load_benchmark(write(tmp_path, text)).defaults.prices["gpt-5.1"]
    assert (price.output, str(price.date)) == (10, "2025-11-13")
    bad = text.replace("input: 1.25", "input: -1").replace("2025-11-13", "soon")
    assert issues_of(tmp_path, bad) == [
        (6, "defaults.prices['gpt-5.1'].date", "expected a date YYYY-MM-DD, got 'soon'"),
        (6, "defaults.prices['gpt-5.1'].input", "expected a number >= 0, got -1"),
    ]


# --------------------------------------------------------------------------- many errors at once


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    text = VALID.replace("version: 1\n", "version: 1\ncolour: blue\n")
    text = text.replace("timeout: 60", "timeout: -3")
    text = text.replace('{single_gpu: "no GPU code path", ', '{cpu: "x", ')  # cpu both, single neither
    text += ("      - id: r1\n"
             "        source: {git: https://example.org/y.git, commit: abc}\n"
             "        entrypoints: {cpu: {command: '{nope}'}}\n"
             "        not_applicable: {single_gpu: a, multi_gpu: b}\n")
    problems = issues_of(tmp_path, text)
    assert [(line, path) for line, path, _ in problems] == [
        (2, "colour"),
        (15, f"{REPO}.entrypoints"),  # single_gpu neither
        (16, f"{REPO}.entrypoints.cpu.timeout"),
        (17, f"{REPO}.not_applicable.cpu"),  # cpu both
        (18, "suites.s.repos[1].id"),
        (19, "suites.s.repos[1].source.commit"),
        (20, "suites.s.repos[1].entrypoints.cpu.command"),
    ]


def test_format_issues_sorts_by_line() -> None:
    issues = [SpecIssue("b.yaml", 9, "x", "late"), SpecIssue("b.yaml", None, "", "no line"),
              SpecIssue("b.yaml", 2, "y", "early")]
    assert format_issues(issues).splitlines() == [
        "b.yaml: no line", "b.yaml:2: y: early", "b.yaml:9: x: late"]


def test_empty_and_non_mapping_files(tmp_path: Path) -> None:
    assert issues_of(tmp_path, "") == [
        (None, "", "the file is empty; expected a mapping with at least `version` and `suites`")]
    assert issues_of(tmp_path, "- 1\n") == [(1, "", "expected a mapping, got a list")]
    with pytest.raises(SpecError, match="missing.yaml: no such file"):
        load_benchmark(tmp_path / "missing.yaml")


# --------------------------------------------------------------------------- helpers


def test_render_and_argv() -> None:
    assert render("{python} -c 'x={{1}}' {ngpus}", {"python": "/p", "ngpus": "2"}) == \
        "/p -c 'x={1}' 2"
    with pytest.raises(TemplateError, match=r"needs \{repo\}"):
        render("{repo}/x", {"python": "/p"})
    shell = CpuEntrypoint(command="{python} main.py --data {repo}/d", env={"X": "{gpus}"})
    values = {"python": "/my env/python", "repo": "/r", "gpus": ""}
    assert shell.argv(values) == ["/bin/sh", "-c", "'/my env/python' main.py --data /r/d"]
    assert shell.render_env(values) == {"X": ""}
    argv = CpuEntrypoint(command=["{python}", "main.py"])
    assert argv.argv(values) == ["/my env/python", "main.py"]


def test_lookups_list_the_known_names(tmp_path: Path) -> None:
    bench = load_benchmark(write(tmp_path, VALID))
    assert bench.agent() is bench.agent("a")
    with pytest.raises(SpecLookupError) as caught:
        bench.suite("nope")
    assert str(caught.value) == "unknown suite 'nope'; known: s"
    assert isinstance(caught.value, KeyError)
    with pytest.raises(SpecLookupError, match="unknown agent 'zz'; known: a"):
        bench.agent("zz")
    with pytest.raises(SpecLookupError, match="unknown host 'h'; known: local"):
        bench.host("h")
    with pytest.raises(SpecLookupError, match="unknown repo 'r9'; known: r1"):
        bench.suite("s").repo("r9")


def test_tier_timeouts_fall_back_to_defaults(tmp_path: Path) -> None:
    text = edit(", timeout: 60}", "}").replace(
        'single_gpu: "no GPU code path", ', "").replace(
        "          cpu:", "          single_gpu: {command: x, timeout: 42}\n          cpu:")
    bench = load_benchmark(write(tmp_path, text))
    repo = bench.suite("s").repo("r1")
    assert bench.tier_timeout(repo, "cpu") == bench.tier_timeout(repo, "C1") == 600
    assert bench.tier_timeout(repo, "C3") == 42
    assert bench.tier_timeout(repo, "C2") == 180
    assert repo.gpus_needed() == 1
    assert isinstance(repo.tiers()["single_gpu"], Entrypoint)


def test_multi_gpu_repo_needs_two_gpus_by_default(tmp_path: Path) -> None:
    text = edit(', multi_gpu: "no GPU code path"', "").replace(
        "          cpu:", "          multi_gpu: {command: torchrun x.py}\n          cpu:")
    assert load_benchmark(write(tmp_path, text)).suite().repos[0].gpus_needed() == 2


def test_loads_benchmark_and_model_round_trip(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    bench = loads_benchmark(VALID, tmp_path, file="inline.yaml")
    again = Benchmark.model_validate(bench.model_dump(), context={"base_dir": tmp_path})
    assert again == bench and again.base_dir == tmp_path
    with pytest.raises(SpecError, match=r"^inline\.yaml:15: "):
        loads_benchmark(VALID.replace("timeout: 60", "timeout: 0"), tmp_path, file="inline.yaml")


def test_snapshot_round_trip_survives_a_moved_catalog(tmp_path: Path) -> None:
    bench = load_benchmark(write(tmp_path, VALID))
    assert bench.source_path == tmp_path / "benchmark.yaml"
    snapshot = json.loads(json.dumps(bench.snapshot()))
    (tmp_path / "repo").rmdir()  # the bundled tree is gone; the run has its own copy

    restored = benchmark_from_snapshot(snapshot, tmp_path)

    assert restored.model_dump() == bench.model_dump()
    assert restored.base_dir == tmp_path and restored.source_path is None
    snapshot["suites"]["s"]["repos"][0]["entrypoints"]["cpu"]["timeout"] = -1
    with pytest.raises(SpecError, match=r"<snapshot>: suites\.s\.repos\[0\].*got -1"):
        benchmark_from_snapshot(snapshot, tmp_path)


def test_yaml_merge_keys_keep_positions_and_let_explicit_keys_win() -> None:
    data, positions = load_yaml("base: &b\n  x: 1\n  y: 2\nuse:\n  <<: *b\n  x: 3\n")
    assert data["use"] == {"x": 3, "y": 2}
    assert positions.line(("use", "x")) == 6
    assert positions.line(("use", "y")) == 3  # where the merged value is written
    assert positions.line(("use", "missing")) == 4  # nearest ancestor
