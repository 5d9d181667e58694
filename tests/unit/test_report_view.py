"""The dashboard's "report vs probes" view (tui/screens/report.py `report_table`) shows every claim the audit
read, and every key it did not score, beside what the probes observed."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from resenv.tui.screens import report_table


def text_of(renderable: Any) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_papers_torch_version_and_not_scored_keys_are_shown() -> None:
    claims = {"python_path": "/w/env/bin/python", "torch_version": "2.1.0", "env_tool": "conda",
              "env_name": "repo-env", "my_extra": {"a": 1}, "notes": "built with conda"}
    evidence = {
        "claims": claims, "checked": ["python_path"], "unverifiable": [],
        "not_scored": ["env_tool", "env_name", "my_extra", "notes"],
        "hallucinations": [{"claim": "torch_version", "kind": "version", "claimed": "2.1.0", "observed": "2.3.1",
                            "message": "claimed torch 2.1.0, observed 2.3.1"}],
        "observed": {"python_path": "/w/env/bin/python", "python_exists": True, "framework": "torch",
                     "framework_version": "2.3.1"},
    }
    text = text_of(report_table({"status": "fail", "evidence": evidence}, True))
    row = next(line for line in text.splitlines() if line.startswith("torch_version"))
    assert "2.1.0" in row and "hallucination (version)" in row
    not_scored = next(line for line in text.splitlines() if line.startswith("not scored"))
    for shown in ("env_tool: conda", "env_name: repo-env", 'my_extra: {"a": 1}'):
        assert shown in not_scored
    assert "notes (not a claim): built with conda" in text


def test_no_torch_version_row_when_the_report_has_none() -> None:
    evidence = {"claims": {"python_path": "/p"}, "checked": ["python_path"], "observed": {"python_path": "/p"}}
    text = text_of(report_table({"status": "pass", "evidence": evidence}, True))
    assert "torch_version" not in text and "not scored" not in text


def test_each_framework_claim_is_shown_beside_the_observation_of_that_framework() -> None:
    from dataclasses import asdict

    from resenv.probes.audit import FrameworkSeen, Observations

    observed = Observations(
        python_path="/p", python_exists=True, python_executable=True, python_runs=True, framework="jax",
        frameworks={"torch": FrameworkSeen("torch", True, True, version="2.3.1+cpu", cuda_available=False,
                                           device_count=0),
                    "jax": FrameworkSeen("jax", True, True, version="0.4.30", cuda_build="12.3", cuda_available=True,
                                         device_count=1),
                    "tensorflow": FrameworkSeen("tensorflow", False, False, error="ModuleNotFoundError")})
    claims = {"python_path": "/p", "framework": {"name": "tensorflow", "version": "2.16.1"}, "torch_version": "2.3.1",
              "cuda_available": True, "gpu_count": 1}
    evidence = {"claims": claims, "observed": asdict(observed), "checked": [], "unverifiable": []}
    lines = text_of(report_table({"status": "fail", "evidence": evidence}, True)).splitlines()

    def row(name: str) -> str:
        return next(line for line in lines if line.startswith(name + " "))

    assert "not installed" in row("framework.name") and "not installed" in row("framework.version")
    assert "2.3.1+cpu" in row("torch_version")
    # tensorflow does not import, so the GPU claims are about JAX, the framework the repo runs on
    assert "jax: true" in row("cuda_available") and "jax: 1" in row("gpu_count")

    evidence["observed"]["gpus_leased"] = 0
    lines = text_of(report_table({"status": "fail", "evidence": evidence}, True)).splitlines()
    assert "no GPU leased to the job" in row("cuda_available") and "no GPU leased to the job" in row("gpu_count")


def test_unreadable_probe_output_is_shown() -> None:
    evidence = {"claims": {"python_path": "/p"}, "observed": {"python_path": "/p"},
                "probe_errors": ["frameworks.torch.version: expected a string or null, got 3"]}
    text = text_of(report_table({"status": "fail", "category": "runtime", "evidence": evidence}, True))
    assert "probe output not readable" in text and "frameworks.torch.version" in text
