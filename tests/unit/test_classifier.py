"""The failure classifier against real error texts (tests/fixtures/errors) and its ordering rules."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from resenv.probes.classifier import (
    CATEGORIES,
    EVIDENCE_CHARS,
    NOT_INFERRED,
    RULES,
    SCAN_CHARS,
    Classification,
    classify,
    last_exception_line,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "errors"
EXPECTED: dict[str, str] = json.loads((FIXTURES / "expected.json").read_text())
HEADER = re.compile(r"^# (source|returncode|timed_out|tier): ?(.*)$")


def load_fixture(name: str) -> tuple[str, dict[str, str]]:
    """The fixture's output text and its header fields (source, returncode, timed_out, tier)."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines(keepends=True)
    header: dict[str, str] = {}
    while lines and (match := HEADER.match(lines[0].rstrip("\n"))):
        header[match.group(1)] = match.group(2).strip()
        lines.pop(0)
    return "".join(lines), header


def classify_fixture(name: str) -> Classification:
    text, header = load_fixture(name)
    returncode = int(header["returncode"]) if "returncode" in header else 1
    return classify(text, returncode=returncode, timed_out=header.get("timed_out") == "true",
                    tier=header.get("tier"))


def test_fixture_set_is_complete() -> None:
    on_disk = {path.name for path in FIXTURES.glob("*.txt")}
    assert on_disk == set(EXPECTED), "every fixture has an expected category and vice versa"
    assert set(EXPECTED.values()) <= set(CATEGORIES)
    inferable = set(CATEGORIES) - set(NOT_INFERRED)
    assert inferable <= set(EXPECTED.values()), "each category the text can decide has a real fixture"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_classifies_as_expected(name: str) -> None:
    _, header = load_fixture(name)
    assert header.get("source"), f"{name} says where it came from"
    verdict = classify_fixture(name)
    assert verdict.category == EXPECTED[name], (name, verdict)
    assert verdict.evidence.strip(), name
    assert len(verdict.evidence) <= EVIDENCE_CHARS
    assert verdict.signature in {"default", "timed_out"} | {rule.name for rule in RULES}


# --- ordering ---------------------------------------------------------------------------------


def test_nccl_error_that_mentions_cuda_is_nccl() -> None:
    text = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\n"
        "Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'\n"
    )
    verdict = classify(text, returncode=1)
    assert verdict.category == "nccl"
    assert "nccl" in verdict.evidence.lower()


def test_compiled_submodule_missing_is_native_not_deps() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    from detectron2 import _C\n"
        "ModuleNotFoundError: No module named 'detectron2._C'\n"
    )
    verdict = classify(text, returncode=1)
    assert verdict == Classification("native_extension", "compiled_module_missing",
                                     "ModuleNotFoundError: No module named 'detectron2._C'")
    plain = classify(text.replace("detectron2._C", "detectron2"), returncode=1)
    assert plain.category == "deps_missing"


def test_timed_out_wins_over_any_text() -> None:
    text, _ = load_fixture("oom_cuda_out_of_memory.txt")
    verdict = classify(text, returncode=-9, timed_out=True)
    assert verdict.category == "timeout" and verdict.signature == "timed_out"
    assert verdict.evidence.startswith("torch.OutOfMemoryError")
    assert classify("", returncode=None, timed_out=True).evidence


def test_final_exception_outvotes_earlier_noise() -> None:
    # a warning about a missing module and a retried download earlier in the log, then an OOM
    text = (
        "UserWarning: Failed to initialize NumPy: No module named 'numpy'\n"
        "WARNING: Retrying after connection broken by 'NewConnectionError(... Failed to establish a new connection)'\n"
        "ModuleNotFoundError: No module named 'wandb' (optional, logging disabled)\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in <module>\n'
        "    x = torch.empty(n, device='cuda')\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 GiB.\n"
    )
    assert classify(text, returncode=1).category == "oom"


def test_oom_in_a_child_beats_the_other_ranks_nccl_errors() -> None:
    oom, _ = load_fixture("oom_cuda_out_of_memory.txt")
    nccl, _ = load_fixture("nccl_watchdog_timeout.txt")
    wrapper = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \ntrain.py FAILED\n"
    text = "[rank0]: " + oom.replace("\n", "\n[rank0]: ") + "\n" + nccl + "Traceback (most recent call last):\n" + wrapper
    verdict = classify(text, returncode=1)
    assert verdict.category == "oom"
    assert "CUDA out of memory" in verdict.evidence


def test_repo_own_cannot_import_is_runtime_but_third_party_is_deps() -> None:
    own = "ImportError: cannot import name 'Block' from 'models.vit' (/work/repo/models/vit.py)\n"
    third = "ImportError: cannot import name 'Block' from 'timm.layers' (/env/lib/python3.11/site-packages/timm/layers/__init__.py)\n"
    assert classify(own, returncode=1).category == "runtime"
    assert classify(third, returncode=1).category == "deps_missing"


def test_cuda_runtime_library_missing_is_cuda_mismatch_driver_library_is_no_gpu() -> None:
    assert classify("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
                    returncode=1).category == "cuda_mismatch"
    assert classify("OSError: libcuda.so.1: cannot open shared object file: No such file or directory",
                    returncode=1).category == "no_gpu"
    assert classify("ImportError: libgomp.so.1: cannot open shared object file: No such file or directory",
                    returncode=1).category == "native_extension"


def test_cpu_only_torch_is_cuda_mismatch_except_on_c1() -> None:
    text, _ = load_fixture("cuda_torch_not_compiled_with_cuda.txt")
    assert classify(text, returncode=1).category == "cuda_mismatch"
    assert classify(text, returncode=1, tier="C3").category == "cuda_mismatch"
    assert classify(text, returncode=1, tier="C1").category == "no_gpu"
    assert classify(text, returncode=1, tier="c1").category == "no_gpu"


def test_pip_no_matching_distribution_is_download_failed() -> None:
    text = "ERROR: No matching distribution found for torch==1.7.1+cu110\n"
    assert classify(text, returncode=1) == Classification("download_failed", "pip_not_found", text.strip())


def test_cpu_fallback_warning_is_not_no_gpu() -> None:
    text = (
        "UserWarning: CUDA is not available, falling back to CPU\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "ValueError: expected 3 channels, got 4\n"
    )
    assert classify(text, returncode=1) == Classification("runtime", "default", "ValueError: expected 3 channels, got 4")
    assert classify("RuntimeError: CUDA is not available", returncode=1).category == "no_gpu"


def test_benign_nccl_shutdown_warning_is_not_nccl() -> None:
    text = (
        "[rank0]: ValueError: bad config\n"
        "[rank0]:[W1129 11:31:36.149923726 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() "
        "was not called before program exit, which can leak resources.\n"
    )
    assert classify(text, returncode=1).category == "runtime"


def test_exit_codes_alone() -> None:
    assert classify("", returncode=127) == Classification("entrypoint_not_found", "exit_127", "exit code 127")
    assert classify("", returncode=126).category == "entrypoint_not_found"
    assert classify("step 10 loss 1.0\n", returncode=-9) == Classification("oom", "sigkill", "step 10 loss 1.0")
    assert classify("step 10 loss 1.0\n", returncode=137).category == "oom"
    # a "Killed" line only means the OOM killer when the exit code says SIGKILL
    assert classify("Killed\n", returncode=1).category == "runtime"


# --- defaults and helpers -----------------------------------------------------------------------


def test_unmatched_failure_is_runtime_default() -> None:
    text = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyError: 'lr'\n"
    assert classify(text, returncode=1) == Classification("runtime", "default", "KeyError: 'lr'")
    assert classify("", returncode=1) == Classification("runtime", "default", "exit code 1")
    assert classify("all good\n", returncode=0) == Classification("runtime", "default", "all good")


def test_inferred_categories_never_include_engine_or_audit_ones() -> None:
    assert set(NOT_INFERRED) == {"infra", "missing_report", "invalid_report", "no_interpreter"}
    assert set(NOT_INFERRED) <= set(CATEGORIES)
    assert {rule.category for rule in RULES} <= set(CATEGORIES) - set(NOT_INFERRED)
    assert len({rule.name for rule in RULES}) == len(RULES)


def test_last_exception_line() -> None:
    text, _ = load_fixture("native_numpy_abi.txt")
    assert last_exception_line(text) == "ImportError: numpy.core.multiarray failed to import"
    text, _ = load_fixture("runtime_device_side_assert.txt")
    assert last_exception_line(text) == "torch.AcceleratorError: CUDA error: device-side assert triggered"
    text, _ = load_fixture("oom_python_memoryerror.txt")
    assert last_exception_line(text) == "MemoryError"
    text, _ = load_fixture("nccl_duplicate_gpu.txt")
    assert last_exception_line(text) == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
    text, _ = load_fixture("deps_pip_build_needs_torch.txt")
    assert last_exception_line(text) == "ModuleNotFoundError: No module named 'torch'"
    assert last_exception_line("ImportError: libcudart.so.12: cannot open shared object file") is not None
    assert last_exception_line("nothing to see\n") is None
    chained = (
        "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n  File \"a.py\", line 3\n    raise RuntimeError('boom')\nRuntimeError: boom\n"
    )
    assert last_exception_line(chained) == "RuntimeError: boom"


def test_long_lines_are_clipped_around_the_match() -> None:
    text = "RuntimeError: " + "x" * 5000 + " CUDA out of memory. Tried to allocate 2.00 GiB " + "y" * 5000
    verdict = classify(text, returncode=1)
    assert verdict.category == "oom"
    assert len(verdict.evidence) <= EVIDENCE_CHARS
    assert "CUDA out of memory" in verdict.evidence


def test_large_output_is_fast_and_reads_only_the_tail() -> None:
    noise_line = "epoch 3 step 1234 loss 0.4321 lr 1e-4 grad_norm 0.98 tokens/s 123456 | some log text here\n"
    noise = noise_line * (10 * 1024 * 1024 // len(noise_line))
    error, _ = load_fixture("nccl_duplicate_gpu.txt")
    started = time.perf_counter()
    verdict = classify(noise + error, returncode=1)
    elapsed = time.perf_counter() - started
    assert verdict.category == "nccl"
    assert elapsed < 1.0, f"classify took {elapsed:.2f}s on 10 MB"
    # the worst case: nothing matches, every rule scans the whole window
    started = time.perf_counter()
    assert classify(noise, returncode=1).signature == "default"
    assert time.perf_counter() - started < 1.0
    # an error that scrolled out of the window no longer counts
    old = "ModuleNotFoundError: No module named 'einops'\n" + noise_line * (SCAN_CHARS // len(noise_line) + 10)
    assert classify(old, returncode=1).category == "runtime"


# --- one example per signature ------------------------------------------------------------------

SIGNATURE_EXAMPLES = [
    ("RuntimeError: CUDA error: out of memory", "oom"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.", "oom"),
    ("terminate called after throwing an instance of 'std::bad_alloc'", "oom"),
    ("OSError: [Errno 12] Cannot allocate memory", "oom"),
    ("  traceback : Signal 9 (SIGKILL) received by PID 1234", "oom"),
    ("RuntimeError: CUDA error: no CUDA-capable device is detected", "no_gpu"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.", "no_gpu"),
    ("AssertionError: No GPU found", "no_gpu"),
    ("    assert torch.cuda.is_available()\nAssertionError", "no_gpu"),
    ("RuntimeError: Some NCCL operations have failed or timed out.", "nccl"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.", "nccl"),
    ("RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.", "cuda_mismatch"),
    ("RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major versions.",
     "cuda_mismatch"),
    ("OSError: libcublasLt.so.12: cannot open shared object file: No such file or directory", "cuda_mismatch"),
    ("ImportError: /env/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined "
     "symbol: _ZN3c104cuda9SetDeviceEi", "native_extension"),
    ("ModuleNotFoundError: No module named 'flash_attn_2_cuda'", "native_extension"),
    ("ModuleNotFoundError: No module named 'mmcv._ext'", "native_extension"),
    ("ModuleNotFoundError: No module named '_lzma'", "native_extension"),
    ("ValueError: numpy.dtype size changed, may indicate binary incompatibility. Expected 96 from C header, got 88 "
     "from PyObject", "native_extension"),
    ("error: command '/usr/bin/gcc' failed with exit code 1", "native_extension"),
    ("ERROR: HTTP error 404 while getting https://example.invalid/x.whl", "download_failed"),
    ("socket.gaierror: [Errno -3] Temporary failure in name resolution", "download_failed"),
    ("fatal: unable to access 'https://example.invalid/x.git/': Could not resolve host: example.invalid",
     "download_failed"),
    ("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://example.invalid/w.pt",
     "download_failed"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error.", "download_failed"),
    ("OSError: We couldn't connect to 'https://example.invalid' to load this file", "download_failed"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/env/bin/python3'", "entrypoint_not_found"),
    ("pkg_resources.DistributionNotFound: The 'tqdm>=4.27' distribution was not found and is required by the "
     "application", "deps_missing"),
    ("ImportError: tokenizers>=0.11.1,!=0.11.3,<0.14 is required for a normal functioning of this module, but found "
     "tokenizers==0.15.0.", "deps_missing"),
    ("ImportError: Using `bitsandbytes` 8-bit quantization requires Accelerate: `pip install accelerate`",
     "deps_missing"),
    ("ImportError: cannot import name 'LlamaFlashAttention2' from 'transformers.models.llama.modeling_llama' "
     "(unknown location)", "deps_missing"),
    ("KeyError: 'config.yaml': not found", "runtime"),
]


@pytest.mark.parametrize(("text", "category"), SIGNATURE_EXAMPLES)
def test_signature_examples(text: str, category: str) -> None:
    verdict = classify(text + "\n", returncode=1)
    assert verdict.category == category, verdict


def test_hints_never_hide_a_match() -> None:
    texts = [load_fixture(name)[0] for name in EXPECTED] + [text for text, _ in SIGNATURE_EXAMPLES]
    for rule in RULES:
        if rule.pattern is None:
            continue
        for text in texts:
            if rule.pattern.search(text):
                assert rule.may_match(text), (rule.name, text[:200])
