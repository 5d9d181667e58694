"""The failure classifier: one set of ordered signatures over a tier's output decides its category.

Every failing tier (C1-C4 entrypoint runs, the C2 framework probe, ...) hands the tail of its output,
its exit code, whether it hit its timeout and (for entrypoint runs) the compiled modules the repo
declares to `classify`, which returns a `Classification`:
the category (one of `CATEGORIES`), the name of the signature that matched (or "default"), and the
line that proves it (at most 300 characters).

How a verdict is reached
------------------------
1. `timed_out` wins outright: a run killed at its limit is `timeout`, whatever it printed on the way
   (a hung NCCL collective that the engine killed is a timeout too; NCCL's own watchdog firing
   before the engine's limit is `nccl`).
2. Only the last `SCAN_CHARS` (256 KiB) of the output are read, cut at a line start; prefixes that
   launchers put before each line (`[rank0]: `, `[default0]:`) are removed.
3. The final exception block (see `last_exception_line`: the last line of the last Python traceback,
   plus the message lines that follow it) is matched against the rules first, in order: the final
   exception is what killed the process, so an earlier warning that happens to mention a missing
   module or an unreachable host does not outvote it.
4. When the final exception matches no rule (it is a wrapper such as torchrun's `ChildFailedError` or
   `subprocess.CalledProcessError`, a generic error of the program's own, or there is no Python
   traceback at all: pip, the shell, NCCL's log), the whole tail is searched with the same ordered
   rules; the first rule that matches anywhere wins and the evidence is the line of its LAST match.
5. Nothing matched: `runtime` with signature "default" (also for a returncode of 0: callers only ask
   about failures, and then the text alone decides).

Rule order (first match wins) and why
-------------------------------------
- `oom` first: an out-of-memory kill is the root cause even when other ranks then fail in NCCL or
  the launcher reports a generic child failure; its signatures are specific ("CUDA out of memory",
  `torch.OutOfMemoryError`, CUBLAS_STATUS_ALLOC_FAILED, `MemoryError`, the CPU allocator's
  "can't allocate memory", a torchrun child killed by SIGKILL, a shell's "Killed" with exit 137/-9).
  NCCL's own "Cuda failure 'out of memory'" is not one of them: that stays `nccl`.
- `no_gpu` before `nccl`: "ProcessGroupNCCL is only supported with GPUs, no GPUs found!" and NCCL
  errors caused by "no CUDA-capable device" are failures to see a GPU, not of communication.
  Only exception-shaped "CUDA is not available" messages count, never a warning that a CPU run
  printed on its way ("CUDA not available, falling back to CPU").
- `nccl` before `cuda_mismatch` (and everything below): NCCL errors mention CUDA ("unhandled cuda
  error", "Call to CUDA function failed") but are failures of the collective layer. The category
  also covers the c10d layer under it (`DistBackendError`, `DistNetworkError`, `DistStoreError`) and
  a torch build without NCCL ("Distributed package doesn't have NCCL built in").
- `cuda_mismatch` before `native_extension`: a CUDA runtime library of another version missing
  (`libcudart.so.11.0: cannot open shared object file`) is a CUDA build mismatch, though it reads like
  a broken extension. "Torch not compiled with CUDA enabled" is a CPU-only wheel installed where a
  GPU exists: the agent picked the wrong build, so `cuda_mismatch` - except on tier C1, where GPUs
  are hidden on purpose and the entrypoint asking for CUDA at all is the failure: `no_gpu`.
  (`libcuda.so.1` missing is the driver itself: `no_gpu`.)
- `native_extension` before `deps_missing`. First on facts: the caller passes the modules the repo
  declares as compiled at its pinned commit (`compiled_modules`, read by `probes.buildinfo`), and a
  failing import of one of them, whatever it is named, is an unbuilt or broken extension: "No module
  named 'x.y'" where x.y is declared, or "cannot import name 'z' from 'x.y'" where x.y.z (the compiled
  module imported from its package) or x.y itself (a name missing from a stale build) is declared;
  a failing module matches a declared name by its whole dotted name or by its last component (a
  CMake or meson target is often declared by its own name only). Then by signature, for compiled
  parts of dependencies that no file of the repo declares: `No module named 'pkg._C'` / `'pkg._ext'`
  / `'xxx_cuda'` (the package is installed but its compiled part is not) and the standard library's
  own compiled modules (`_ctypes`, `_lzma`, ...); undefined symbols, an extension without its
  `PyInit_` function, missing shared objects, DLL load failures, GLIBCXX versions, NumPy 1.x/2.x ABI
  breaks and failed C/C++/CUDA builds ("Failed building wheel", "fatal error: x.h: No such file",
  "CUDA_HOME ... not set").
- `download_failed` before `entrypoint_not_found` and `deps_missing`: pip's "Could not find a version
  that satisfies" / "No matching distribution found" is a download failure (the index did not
  have it or could not be reached), as are connection errors, DNS failures, HTTP errors and the
  Hugging Face hub's offline / not-in-cache errors.
- `entrypoint_not_found` before `deps_missing`: `python3: No module named train` (a `-m` target) or
  "Error while finding module specification" is the entrypoint itself missing, not a dependency;
  also `can't open file`, "command not found" (exit 127), a missing interpreter, exit 126.
- `deps_missing`: `ModuleNotFoundError` / `ImportError: No module named`, `cannot import name X
  from Y` where Y is installed (site-packages, the standard library or an unknown location: a
  version mismatch), pip's ResolutionImpossible, pkg_resources' DistributionNotFound. A "cannot
  import name" from the repo's own module (a path outside site-packages) is the repo's bug: runtime.
- Exit-code-only fallbacks, last so that any text wins: 127 and 126 mean the command could not be
  found or run (`entrypoint_not_found`); -9 / 137 (SIGKILL) that the engine did not send (it was not
  a timeout) is, on these machines, the kernel's or the cgroup's OOM killer (`oom`).
- `infra` (the engine's own failures), `missing_report` and `invalid_report` (the report loader's
  findings), `no_interpreter` (a valid report that names no interpreter: `python_path` absent or
  null), `no_gpu_use` (a C3/C4 entrypoint that exited 0 while the driver never showed one of
  its processes on a leased GPU: engine/gpuwatch.py), `bad_interpreter` and `tampered` (the
  integrity and outcome checks: probes/outcome.py, probes/integrity.py) and `offline_miss` (a
  package an agent working without a package index could not find in its local sources: nothing was
  downloaded, so nothing failed to download; set where the agent is known to be offline) are set by
  their callers and never inferred from text (`CALLER_CATEGORIES`).

The agent's log as root cause
-----------------------------
The entrypoint tiers (C1/C3/C4) turn a `deps_missing` into `download_failed` only when
`blamed_download` finds, in the agent's own log, that the very package the probe's evidence line
misses failed to download: that package (the module of "No module named" / "cannot import name ...
from", or the distribution that pkg_resources, transformers' checks or a "pip install d" hint name)
is mapped to candidate distributions (its name normalised per PEP 503, plus `IMPORT_DISTRIBUTIONS`
for imports such as cv2, yaml, sklearn, PIL, read in both directions), and a failure counts only when
it names a candidate (pip's "No matching distribution found for X" / "Could not find a version that
satisfies the requirement X", uv's "X was not found in the package registry" / "no versions of X" /
"Failed to download `X`", a connection error whose URL names X or that follows pip's "Collecting
X" / "Downloading X-..." closely, a failed `git clone` of X, conda's PackagesNotFoundError listing X)
and no later line shows a candidate installed ("Successfully installed", uv's "+ x==", "Requirement
already satisfied"). Agent event streams (JSON lines) are read by their string values. A download
error for another package, or one the agent recovered from, leaves `deps_missing` as it is.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection
from dataclasses import dataclass

from .buildinfo import declared_match

CATEGORIES = (
    "deps_missing", "native_extension", "cuda_mismatch", "no_gpu", "oom", "nccl", "timeout",
    "entrypoint_not_found", "missing_report", "invalid_report", "no_interpreter", "download_failed", "runtime",
    "infra", "bad_interpreter", "tampered", "no_gpu_use", "offline_miss",
)

CALLER_CATEGORIES = frozenset({"infra", "missing_report", "invalid_report", "no_interpreter", "no_gpu_use",
                               "bad_interpreter", "tampered", "offline_miss"})
"""Categories that callers set from what they measured; no output text ever yields one."""

SCAN_CHARS = 256 * 1024
"""Only this much of the end of an output is read: the final error is at the end."""

EVIDENCE_CHARS = 300
BLOCK_LINES = 30
"""Lines after the final exception line that still belong to its message."""


@dataclass(frozen=True)
class Classification:
    category: str
    signature: str  # the name of the rule that matched, or "default"
    evidence: str  # the matching line, at most EVIDENCE_CHARS characters


@dataclass(frozen=True)
class Rule:
    """One named signature. It applies when the exit code is one of `returncodes` (if given) and
    the tier one of `tiers` (if given), and it matches when its pattern does (a rule without a
    pattern matches on the exit code alone). `hints` are literal strings of which every match
    contains at least one: a text holding none of them is skipped without running the regex.
    A `declared` rule's pattern names a failing import (groups `module`, or `name` and `package`), and
    a match counts only where that import is a compiled module the repo declares."""

    name: str
    category: str
    source: str | None  # the pattern's regex; compiled on first use (see `pattern`)
    hints: tuple[str, ...] = ()
    returncodes: frozenset[int] | None = None
    tiers: frozenset[str] | None = None
    declared: bool = False

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """The compiled pattern. Compiled when first matched, not at import: every engine process
        imports the rules, few classify anything, and compiling them all was a twentieth of its start."""
        return _compile(self.source) if self.source is not None else None

    def applies_to(self, returncode: int | None, tier: str | None) -> bool:
        if self.returncodes is not None and returncode not in self.returncodes:
            return False
        if self.tiers is not None and (tier or "").upper() not in self.tiers:
            return False
        return True

    def may_match(self, text: str) -> bool:
        return not self.hints or any(hint in text for hint in self.hints)


@functools.cache
def _compile(source: str) -> re.Pattern[str]:
    return re.compile(source, re.MULTILINE)


def _rule(name: str, category: str, *patterns: str, hints: tuple[str, ...] = (),
          returncodes: tuple[int, ...] | None = None, tiers: tuple[str, ...] | None = None,
          declared: bool = False) -> Rule:
    source = "|".join(f"(?:{p})" for p in patterns) if patterns else None
    return Rule(name, category, source, hints,
                frozenset(returncodes) if returncodes is not None else None,
                frozenset(tiers) if tiers is not None else None, declared)


# A line that ends in an exception class name, optionally with a message: `torch.OutOfMemoryError: ...`.
_EXC_NAME = r"(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Exit|Interrupt|Expired|NotFound|Conflict|IsEnabled)"
_ERROR_PREFIX = rf"(?:^|\b){_EXC_NAME}:\s*(?:[^\n]*\s)?"  # "...Error: [anything ]" on one line
_CUDA_LIBS = r"cudart|cublas\w*|cudnn\w*|cufft\w*|curand|cusparse\w*|cusolver\w*|nvrtc\w*|nvJitLink|nvToolsExt|cupti"
_LAUNCHERS = r"python[\d.]*|pip[\d.]*|torchrun|accelerate|deepspeed"

RULES: tuple[Rule, ...] = (
    # --- oom -------------------------------------------------------------------------------
    _rule("cuda_out_of_memory", "oom",
          r"CUDA out of memory", r"\btorch\.(?:cuda\.)?OutOfMemoryError\b", r"CUDA error: out of memory",
          r"cudaErrorMemoryAllocation", r"CUBLAS_STATUS_ALLOC_FAILED", r"CUDNN_STATUS_ALLOC_FAILED",
          r"HIP out of memory", r"RESOURCE_EXHAUSTED: Out of memory", r"\bOOM when allocating tensor",
          hints=("out of memory", "Out of memory", "OutOfMemoryError", "cudaErrorMemoryAllocation", "ALLOC_FAILED",
                 "OOM when allocating")),
    _rule("host_out_of_memory", "oom",
          r"DefaultCPUAllocator: can't allocate memory", r"^\s*MemoryError\b", r"\bMemoryError:",
          r"std::bad_alloc", r"\[Errno 12\] Cannot allocate memory", r"Out of memory: Killed process",
          r"\boom-kill(?:er)?\b",
          hints=("can't allocate memory", "MemoryError", "bad_alloc", "Cannot allocate memory", "Out of memory",
                 "oom-kill")),
    _rule("child_sigkill", "oom", r"Signal 9 \(SIGKILL\) received by PID", r"exitcode\s*:\s*-9\b",
          hints=("SIGKILL", "exitcode")),
    _rule("shell_killed", "oom", r"^(?:.*\s)?Killed(?:\s.*)?$", hints=("Killed",), returncodes=(-9, 137)),
    # --- no_gpu ----------------------------------------------------------------------------
    _rule("no_cuda_device", "no_gpu",
          r"No CUDA GPUs are available", r"no CUDA-capable device is detected", r"cudaErrorNoDevice",
          r"Found no NVIDIA driver on your system",
          r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
          r"ProcessGroupNCCL is only supported with GPUs, no GPUs found",
          r"CUDA driver initialization failed, you might not have a CUDA gpu",
          r"\blibcuda\.so(?:\.1)?: cannot open shared object file",
          hints=("No CUDA GPUs", "no CUDA-capable", "cudaErrorNoDevice", "Found no NVIDIA driver", "NVIDIA-SMI has failed",
                 "no GPUs found", "CUDA driver initialization failed", "libcuda.so")),
    _rule("cuda_unavailable", "no_gpu",
          _ERROR_PREFIX + r"(?:CUDA|cuda|GPUs?|gpus?) (?:is |are )?(?:not available|unavailable)",
          _ERROR_PREFIX + r"[Nn]o (?:CUDA )?GPUs? (?:found|available|detected)",
          r"^\s*assert\s+(?:torch\.)?cuda\.is_available\(\)",
          r"torch\.cuda\.is_available\(\)\s*(?:is|returned|==)\s*False",
          r"CUDA_VISIBLE_DEVICES (?:is empty|is set to an empty)",
          hints=("available", "o GPU", "o CUDA GPU", "CUDA_VISIBLE_DEVICES")),
    _rule("cpu_torch_on_cpu_tier", "no_gpu", r"Torch not compiled with CUDA enabled",
          hints=("Torch not compiled with CUDA",), tiers=("C1",)),
    # --- nccl ------------------------------------------------------------------------------
    _rule("nccl_error", "nccl",
          r"\bNCCL error\b", r"\bnccl(?:Internal|System|UnhandledCuda|InvalidArgument|Remote)Error\b",
          r"\bncclInvalidUsage\b", r"Watchdog caught collective operation timeout",
          r"Some NCCL operations have failed or timed out", r"NCCL communicator was aborted",
          r"Distributed package doesn't have NCCL built in", r"NCCL (?:backend )?(?:is )?not available",
          hints=("NCCL", "nccl", "Watchdog caught")),
    _rule("c10d_error", "nccl", r"\btorch\.distributed\.\w*(?:DistBackendError|DistNetworkError|DistStoreError)\b",
          r"\b(?:DistBackendError|DistNetworkError|DistStoreError):",
          hints=("DistBackendError", "DistNetworkError", "DistStoreError")),
    # --- cuda_mismatch ---------------------------------------------------------------------
    _rule("driver_too_old", "cuda_mismatch",
          r"The NVIDIA driver on your system is too old",
          r"CUDA driver version is insufficient for CUDA runtime version", r"cudaErrorInsufficientDriver",
          hints=("driver on your system is too old", "CUDA driver version is insufficient", "cudaErrorInsufficientDriver")),
    _rule("no_kernel_image", "cuda_mismatch",
          r"no kernel image is available for execution on the device", r"cudaErrorNoKernelImageForDevice",
          r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation",
          r"the provided PTX was compiled with an unsupported toolchain", r"CUDA error: unsupported PTX version",
          r"cudaErrorUnsupportedPtxVersion", r"nvrtc: error: invalid value for --gpu-architecture",
          hints=("no kernel image", "cudaErrorNoKernelImageForDevice", "is not compatible with the current PyTorch",
                 "PTX", "Ptx", "nvrtc")),
    _rule("cuda_version_mismatch", "cuda_mismatch",
          r"The detected CUDA version \((?:[\d.]+|%s)\) mismatches the version that was used to compile",
          r"compiled with different CUDA (?:major )?versions",
          rf"(?:ImportError|OSError)[^\n]*\blib(?:{_CUDA_LIBS})\.so[\d.]*: cannot open shared object file",
          hints=("mismatches the version", "compiled with different CUDA", "cannot open shared object file")),
    _rule("torch_cpu_build", "cuda_mismatch", r"Torch not compiled with CUDA enabled",
          hints=("Torch not compiled with CUDA",)),
    # --- native_extension ------------------------------------------------------------------
    _rule("declared_extension_missing", "native_extension",
          r"No module named '(?P<module>[\w.]+)'", r"cannot import name '(?P<name>\w+)' from '(?P<package>[\w.]+)'",
          hints=("No module named '", "cannot import name '"), declared=True),
    _rule("undefined_symbol", "native_extension", r"undefined symbol: \S+",
          r"dynamic module does not define module export function", hints=("undefined symbol", "dynamic module")),
    _rule("shared_object_missing", "native_extension",
          r"cannot open shared object file", r"DLL load failed", r"version `GLIBC(?:XX)?_[\d.]+' not found",
          r"wrong ELF class", r"invalid ELF header", r"(?:ImportError|OSError): \S+\.(?:so|pyd|dll)(?:\.[\d.]+)?\b",
          hints=("cannot open shared object file", "DLL load failed", "not found", "ELF", ".so", ".pyd", ".dll")),
    _rule("compiled_module_missing", "native_extension",
          r"No module named '(?:[\w.]+\.)?(?:_C\w*|_ext\w*|\w+_(?:C|cuda|cpp|ext|kernels?))'",
          r"No module named '_(?:ctypes|sqlite3|lzma|bz2|ssl|tkinter|curses|dbm|gdbm|hashlib|uuid|decimal)'",
          r"cannot import name '(?:_C\w*|_ext\w*|\w+_(?:C|cuda|cpp|ext))' from",
          hints=("No module named '", "cannot import name '")),
    _rule("numpy_abi", "native_extension",
          r"compiled using NumPy 1\.x cannot be run in", r"numpy\.core\.multiarray failed to import",
          r"_ARRAY_API not found", r"numpy\.dtype size changed, may indicate binary incompatibility",
          r"module compiled against (?:ABI|API) version",
          hints=("NumPy", "numpy", "_ARRAY_API", "module compiled against")),
    _rule("native_build_failed", "native_extension",
          r"Failed building wheel for", r"Could not build wheels for", r"Failed to build installable wheels",
          r"error: command '[^'\n]*(?:gcc|g\+\+|cc|c\+\+|clang\+*|nvcc|cl\.exe)' failed",
          r"fatal error: [\w./+-]+\.(?:h|hh|hpp|cuh): No such file or directory", r"ninja: build stopped",
          r"Error building extension '", r"Error compiling objects for extension",
          r"CUDA_HOME environment variable is not set", r"\bnvcc fatal\b", r"collect2: error: ld returned",
          r"Microsoft Visual C\+\+ [\d.]+ or greater is required",
          hints=("wheel", "error: command '", "fatal error", "ninja", "Error building extension", "Error compiling objects",
                 "CUDA_HOME", "nvcc fatal", "collect2", "Microsoft Visual C++")),
    # --- download_failed -------------------------------------------------------------------
    _rule("pip_not_found", "download_failed",
          r"Could not find a version that satisfies the requirement", r"No matching distribution found for",
          r"ERROR: HTTP error \d+ while getting",
          hints=("Could not find a version", "No matching distribution", "HTTP error")),
    _rule("network_unreachable", "download_failed",
          r"Failed to establish a new connection", r"Temporary failure in name resolution",
          r"Name or service not known", r"nodename nor servname provided", r"Could not resolve host",
          r"Max retries exceeded with url", r"fatal: unable to access '",
          r"\b(?:URLError|HTTPError|ConnectionError|ConnectTimeout|ReadTimeout|ReadTimeoutError|MaxRetryError"
          r"|NewConnectionError|NameResolutionError|ConnectError|ContentTooShortError|ChunkedEncodingError)\b:",
          hints=("Failed to establish", "name resolution", "Name or service not known", "nodename nor servname",
                 "Could not resolve host", "Max retries exceeded", "unable to access", "Error:", "Timeout:")),
    _rule("hub_unavailable", "download_failed",
          r"\b(?:Local)?EntryNotFoundError\b", r"\bOfflineModeIsEnabled\b", r"\bRepositoryNotFoundError\b",
          r"\bGatedRepoError\b", r"\bRevisionNotFoundError\b", r"\bHfHubHTTPError\b",
          r"We couldn't connect to '[^'\n]+' to load", r"\bFailed to download\b",
          hints=("EntryNotFoundError", "OfflineModeIsEnabled", "RepositoryNotFoundError", "GatedRepoError",
                 "RevisionNotFoundError", "HfHubHTTPError", "We couldn't connect to", "Failed to download")),
    # --- entrypoint_not_found --------------------------------------------------------------
    _rule("script_missing", "entrypoint_not_found",
          r"can't open file '[^'\n]*': \[Errno 2\] No such file or directory",
          r"^\S*python[\d.]*: No module named \S+", r"^\S*python[\d.]*: Error while finding module specification for",
          r"is not a valid Python (?:executable|interpreter)",
          hints=("can't open file", "No module named", "Error while finding module specification", "is not a valid Python")),
    _rule("command_not_found", "entrypoint_not_found",
          r"^\S+: line \d+: [^:\n]+: command not found\s*$",  # bash running a script or -c
          r"^\S*sh: (?:\d+: )?[^:\n]+: (?:command )?not found\s*$",  # sh/dash/bash/zsh
          r"\benv: ['\u2018\"]?[^'\u2019\"\n]+['\u2019\"]?: No such file or directory",  # a shebang's interpreter
          rf"(?:^|: )\S*/(?:{_LAUNCHERS}): No such file or directory\s*$",
          rf"\[Errno 2\] No such file or directory: '[^'\n]*/(?:{_LAUNCHERS})'",
          hints=("not found", "No such file or directory")),
    _rule("not_executable", "entrypoint_not_found", r"Permission denied\s*$", r"cannot execute",
          hints=("Permission denied", "cannot execute"), returncodes=(126,)),
    # --- deps_missing ----------------------------------------------------------------------
    _rule("module_not_found", "deps_missing",
          r"(?:ModuleNotFoundError|ImportError): No module named", r"^\s*No module named '",
          hints=("No module named",)),
    _rule("cannot_import_name", "deps_missing",
          r"cannot import name '[^'\n]+' from '[^'\n]+' \((?:unknown location|[^)\n]*(?:site-packages|dist-packages"
          r"|[/\\]lib[/\\]python\d[\d.]*[/\\])[^)\n]*)\)",
          r"ImportError: cannot import name '[^'\n]+' from '[^'\n]+'\s*$",
          hints=("cannot import name",)),
    _rule("requirement_unsatisfied", "deps_missing",
          r"\bDistributionNotFound\b", r"The '[^'\n]+' distribution was not found and is required by",
          r"\bVersionConflict\b", r"\bResolutionImpossible\b",
          r"because these package versions have conflicting dependencies",
          r"requires the following packages that were not found in your environment",
          r"is required for a normal functioning of this module, but found",
          r"requires the \w+ library but it was not found in your environment",
          r"ImportError:[^\n]*\bpip install\b",
          hints=("DistributionNotFound", "distribution was not found", "VersionConflict", "ResolutionImpossible",
                 "conflicting dependencies", "packages that were not found", "is required for a normal functioning",
                 "library but it was not found", "pip install")),
    # --- exit codes alone ------------------------------------------------------------------
    _rule("exit_127", "entrypoint_not_found", returncodes=(127,)),
    _rule("exit_126", "entrypoint_not_found", returncodes=(126,)),
    _rule("sigkill", "oom", returncodes=(-9, 137)),
)

_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:[ \t]?", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last):"
_EXC_LINE = re.compile(rf"^(?P<indent>[ \t]*)(?P<name>{_EXC_NAME})(?::[^\n]*)?$", re.MULTILINE)


def _tail(output: str) -> str:
    """The last SCAN_CHARS characters, from a line start, with launcher rank prefixes removed."""
    if len(output) > SCAN_CHARS:
        output = output[-SCAN_CHARS:]
        newline = output.find("\n")
        if 0 <= newline < len(output) - 1:
            output = output[newline + 1:]
    if "]:" in output:
        output = _RANK_PREFIX.sub("", output)
    return output


def _final_exception(text: str) -> tuple[int, int] | None:
    """(start, end) of the final exception line of the last traceback in `text`, or of the last
    exception-shaped line when there is no traceback."""
    at = text.rfind(_TRACEBACK)
    if at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        indent = len(text[line_start:at]) - len(text[line_start:at].lstrip(" \t"))
        for match in _EXC_LINE.finditer(text, at + len(_TRACEBACK)):
            if len(match.group("indent")) == indent:
                return match.start(), match.end()
    last = None
    for last in _EXC_LINE.finditer(text, max(at, 0)):
        pass
    return (last.start(), last.end()) if last else None


def _clip(line: str, start: int = 0) -> str:
    """`line` stripped, at most EVIDENCE_CHARS long, keeping the part around `start`."""
    line = line.rstrip()
    if len(line) <= EVIDENCE_CHARS:
        return line.strip()
    begin = max(0, min(start - EVIDENCE_CHARS // 3, len(line) - EVIDENCE_CHARS))
    return line[begin:begin + EVIDENCE_CHARS].strip()


def _line_at(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    line = text[start:end if end >= 0 else len(text)]
    return _clip(line, position - start)


def last_exception_line(output: str) -> str | None:
    """The final "SomeError: message" line of the last Python traceback in `output` (or, without
    any traceback, the last exception-shaped line), stripped; None if there is none."""
    text = _tail(output)
    span = _final_exception(text)
    return _clip(text[span[0]:span[1]]) if span else None


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return _clip(line)
    return ""


def _block_end(text: str, start: int) -> int:
    """End of the final exception's message: up to a blank line, the next traceback, or BLOCK_LINES."""
    end = text.find("\n", start)
    for _ in range(BLOCK_LINES):
        if end < 0:
            return len(text)
        following_end = text.find("\n", end + 1)
        following = text[end + 1:following_end if following_end >= 0 else len(text)]
        if not following.strip() or _TRACEBACK in following:
            return end
        end = following_end
    return end if end >= 0 else len(text)


def _is_declared(match: re.Match[str], compiled: Collection[str]) -> bool:
    """Whether the import a `declared` rule's match names is a declared compiled module: the module
    of "No module named 'x.y'", or for "cannot import name 'z' from 'x.y'" either x.y.z (importing the
    compiled module from its package) or x.y itself (a name missing from a stale build)."""
    groups = match.groupdict()
    if groups.get("module"):
        candidates: tuple[str, ...] = (groups["module"],)
    elif groups.get("package") and groups.get("name"):
        candidates = (f"{groups['package']}.{groups['name']}", groups["package"])
    else:
        return False
    return any(declared_match(candidate, compiled) for candidate in candidates)


def _find(rule: Rule, text: str, compiled: Collection[str], *, last: bool) -> int | None:
    """Where the first (or the last) counting match of `rule` in `text` starts, or None."""
    assert rule.pattern is not None
    if not rule.may_match(text):
        return None
    position = None
    for match in rule.pattern.finditer(text):
        if rule.declared and not _is_declared(match, compiled):
            continue
        position = match.start()
        if not last:
            break
    return position


def classify(output: str, *, returncode: int | None, timed_out: bool = False,
             tier: str | None = None, compiled_modules: Collection[str] = ()) -> Classification:
    """The failure category of a tier's `output` (stdout and stderr tails), given its exit code,
    whether it hit its timeout, and which tier it was ("C1".."C4"; it matters for C1).

    `compiled_modules` are the modules the repo declares as compiled at its pinned commit
    (`probes.buildinfo.module_names`): a failing import of one of them is `native_extension`,
    whatever its name. Without them only the name-independent signatures decide."""
    text = _tail(output or "")
    span = _final_exception(text)
    if timed_out:
        evidence = _clip(text[span[0]:span[1]]) if span else _last_line(text)
        return Classification("timeout", "timed_out", evidence or "timed out")
    compiled = frozenset(compiled_modules)
    rules = [rule for rule in RULES if rule.applies_to(returncode, tier) and (compiled or not rule.declared)]
    if span:
        start, end = span[0], _block_end(text, span[0])
        block = text[start:end]
        for rule in rules:
            if rule.pattern is not None and (position := _find(rule, block, compiled, last=False)) is not None:
                return Classification(rule.category, rule.name, _line_at(block, position))
    for rule in rules:
        if rule.pattern is None:
            evidence = _clip(text[span[0]:span[1]]) if span else _last_line(text)
            return Classification(rule.category, rule.name, evidence or f"exit code {returncode}")
        if (position := _find(rule, text, compiled, last=True)) is not None:
            return Classification(rule.category, rule.name, _line_at(text, position))
    evidence = _clip(text[span[0]:span[1]]) if span else _last_line(text)
    return Classification("runtime", "default", evidence or f"exit code {returncode}")


# --- which download failure is to blame -------------------------------------------------------------
#
# A probe's `deps_missing` becomes `download_failed` only when the agent's own log shows that the very
# package the probe misses could not be downloaded: a download error for another package, or one the
# agent recovered from by installing the package after all, explains nothing about this failure.

IMPORT_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "cv2": ("opencv-python", "opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless"),
    "yaml": ("PyYAML",), "sklearn": ("scikit-learn",), "skimage": ("scikit-image",), "PIL": ("Pillow", "pillow-simd"),
    "bs4": ("beautifulsoup4",), "attr": ("attrs",), "dateutil": ("python-dateutil",), "google.protobuf": ("protobuf",),
    "Crypto": ("pycryptodome", "pycrypto"), "jwt": ("PyJWT",), "serial": ("pyserial",), "zmq": ("pyzmq",),
    "fitz": ("PyMuPDF",), "docx": ("python-docx",), "dotenv": ("python-dotenv",), "magic": ("python-magic",),
    "git": ("GitPython",), "OpenGL": ("PyOpenGL",), "Bio": ("biopython",), "hydra": ("hydra-core",),
    "absl": ("absl-py",), "pkg_resources": ("setuptools",), "mpl_toolkits": ("matplotlib",),
    "faiss": ("faiss-cpu", "faiss-gpu"), "Levenshtein": ("python-Levenshtein", "levenshtein"), "tree": ("dm-tree",),
    "haiku": ("dm-haiku",), "mmcv": ("mmcv", "mmcv-full"), "grpc": ("grpcio",), "OpenSSL": ("pyOpenSSL",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"), "websocket": ("websocket-client",),
    "osgeo": ("GDAL",), "psycopg2": ("psycopg2", "psycopg2-binary"),
}
"""Well-known imports whose distribution has another name (an import's own name, normalised, is always
a candidate too); read in both directions."""

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_MISSING = re.compile(
    rf"No module named '(?P<module>[\w.]+)'|cannot import name '\w+' from '(?P<package>[\w.]+)'"
    rf"|The '(?P<dist>{_NAME})[^'\n]*' distribution was not found|DistributionNotFound: (?!The ')(?P<old>{_NAME})"
    rf"|requires the (?P<library>{_NAME}) library but it was not found"
    rf"|(?P<pinned>{_NAME})[<>=!~][^\s]* is required for a normal functioning"
    rf"|pip install (?P<install>{_NAME})"
)
_NOT_FOUND = re.compile(
    rf"No matching distribution found for (?P<req>{_NAME})"
    rf"|Could not find a version that satisfies the requirement (?P<req2>{_NAME})"
    rf"|Because (?P<uv>{_NAME})\S* was not found in the (?:package registry|provided package locations)"
    rf"|Because there (?:is|are) no versions? of (?P<uv2>{_NAME})"
    rf"|Failed to download [`'\"](?P<uv3>{_NAME})"
)
_NETWORK = re.compile(
    r"Failed to establish a new connection|Connection refused|Temporary failure in name resolution"
    r"|Name or service not known|Could not resolve host|Max retries exceeded|Read timed out|ReadTimeoutError"
    r"|ConnectTimeoutError|Connection reset|Network is unreachable|No route to host|connection broken by"
    r"|HTTP error \d+ while getting|Could not fetch URL|error sending request|Failed to fetch|SSLError|ProxyError"
    r"|IncompleteRead|ChunkedEncodingError|ConnectionError"
)
_GIT_FATAL = re.compile(r"fatal: (?:unable to access|repository|could not read \w+ for) '(?P<url>[^'\n]+)'")
_GIT_URL_NAME = re.compile(rf"(?:(?P<name>{_NAME}) ?@ ?)?git\+(?P<url>[^\s#'\"`]+)(?:#(?:\S*&)?egg=(?P<egg>{_NAME}))?")
_URL_NAMES = re.compile(rf"/simple/(?P<index>{_NAME})/|/(?P<file>[A-Za-z0-9][\w.]*?)-\d[^/\s'\"`]*?"
                        rf"\.(?:whl|tar\.gz|tar\.bz2|zip)\b")
_COLLECTING = re.compile(rf"^\s*Collecting (?P<name>{_NAME})|^\s*Downloading (?:\S*/)?(?P<file>[A-Za-z0-9][\w.]*?)-\d",
                         re.MULTILINE)
_CONDA_MISSING = re.compile(r"PackagesNotFoundError[^\n]*\n(?P<list>(?:\s*\n|\s+- [^\n]*\n?)+)")
_RECOVERED = re.compile(
    r"Successfully installed (?P<pip>[^\n]+)|^\s*\+ (?P<uv>" + _NAME + r")==|Requirement already satisfied: (?P<req>"
    + _NAME + r")", re.MULTILINE)
CONTEXT_LINES = 40
"""How far back an unnamed network error looks for the package pip was collecting or downloading."""


def canonical(name: str) -> str:
    """A distribution name normalised as PEP 503 does: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_candidates(name: str) -> frozenset[str]:
    """The canonical names of the distributions that may provide import `name` (dotted), or that
    provide the same import as distribution `name`: its own name normalised, the table's entries for
    it and for its dotted prefixes, and the other distributions of the import a table entry names."""
    parts = name.split(".")
    out = {canonical(parts[0]), canonical(name)}
    for end in range(len(parts), 0, -1):
        out.update(canonical(d) for d in IMPORT_DISTRIBUTIONS.get(".".join(parts[:end]), ()))
    own = canonical(name)
    for distributions in IMPORT_DISTRIBUTIONS.values():
        if own in {canonical(d) for d in distributions}:
            out.update(canonical(d) for d in distributions)
    return frozenset(out)


def _plain(log: str) -> str:
    """`log` with each JSON object line (an agent's event stream) replaced by its string values,
    one per line, so installer output quoted inside events reads as it was printed."""
    if '{"' not in log:
        return log
    lines = []
    for line in log.splitlines():
        stripped = line.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            try:
                lines += _strings(json.loads(stripped))
                continue
            except ValueError:
                pass
        lines.append(line)
    return "\n".join(lines)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _bare_url(url: str) -> str:
    """A git URL without fragment, revision (pip's ``url@rev``), ``.git`` suffix or trailing slash."""
    url = url.split("#", 1)[0]
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if "@" in path:
        path = path.rsplit("@", 1)[0]
    return re.sub(r"(?:\.git)?/*$", "", scheme + sep + host + slash + path)


def _repo_names(url: str, text: str) -> set[str]:
    """The canonical names a failed git URL stands for: its repository's name, and the requirement
    names the log gives that same URL (``name @ git+url``, ``git+url#egg=name``)."""
    target = _bare_url(url)
    names = {target.rsplit("/", 1)[-1]}
    for match in _GIT_URL_NAME.finditer(text):
        if _bare_url(match.group("url")) == target:
            names.add(match.group("name") or match.group("egg") or "")
    return {canonical(name) for name in names if name}


def _download_failures(text: str) -> list[tuple[int, set[str], str]]:
    """(position, canonical names, line) of every download failure in `text` that names its package."""
    found = []
    for match in _NOT_FOUND.finditer(text):
        name = next(g for g in match.groups() if g)
        found.append((match.start(), {canonical(name)}, _line_at(text, match.start())))
    for match in _GIT_FATAL.finditer(text):
        found.append((match.start(), _repo_names(match.group("url"), text), _line_at(text, match.start())))
    for match in _CONDA_MISSING.finditer(text):
        names = {canonical(n) for n in re.findall(rf"^\s+- ({_NAME})", match.group("list"), re.MULTILINE)}
        found.append((match.start(), names, _line_at(text, match.start())))
    for match in _NETWORK.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.start())
        line = text[line_start:line_end if line_end >= 0 else len(text)]
        names = {canonical(m.group("index") or m.group("file")) for m in _URL_NAMES.finditer(line)}
        if not names:  # pip names the package on the line it started fetching it
            window = text[max(0, line_start - 200 * CONTEXT_LINES):line_start].splitlines()[-CONTEXT_LINES:]
            context = [m.group("name") or m.group("file") for m in _COLLECTING.finditer("\n".join(window))]
            names = {canonical(context[-1])} if context else set()
        if names:
            found.append((match.start(), names, _clip(line, match.start() - line_start)))
    return found


def _recoveries(text: str) -> list[tuple[int, str]]:
    """(position, canonical name) of every package the log shows installed or already present."""
    out = []
    for match in _RECOVERED.finditer(text):
        if match.group("pip"):
            out += [(match.start(), canonical(token.rsplit("-", 1)[0])) for token in match.group("pip").split()]
        else:
            out.append((match.start(), canonical(match.group("uv") or match.group("req"))))
    return out


def absent_from_sources(line: str) -> bool:
    """Whether an installer's failure line says the package is not in the sources it searched ("No
    matching distribution found for x", uv's "not found in the provided package locations"), not that
    the network failed: offline, that is a miss of the local sources, not a failed download."""
    return _NOT_FOUND.search(line) is not None and _NETWORK.search(line) is None


def blamed_download(failure: str, agent_log: str) -> str | None:
    """The line of `agent_log` that shows the download of the package named by `failure` (a probe's
    `deps_missing` evidence) failing, or None.

    The package is the module of "No module named 'x.y'" or "cannot import name 'z' from 'x.y'", or
    the distribution of "The 'd' distribution was not found", "requires the d library", "d>=1 is
    required for a normal functioning", "pip install d"; its candidates are `distribution_candidates`.
    A failure counts when it names a candidate: pip's "No matching distribution found for X" /
    "Could not find a version that satisfies the requirement X", uv's "Because X was not found in the
    package registry" / "there are no versions of X" / "Failed to download `X`", a connection error
    whose URL names X (`/simple/x/`, `x-1.0-...whl`) or, naming none, that follows pip's "Collecting
    X" / "Downloading X..." within CONTEXT_LINES lines, a failed `git clone` of X (the repository's
    name, or the requirement name given to that URL), conda's PackagesNotFoundError listing X. It
    does not count when the log later shows a candidate installed ("Successfully installed x-1.0",
    uv's "+ x==1.0", "Requirement already satisfied: x"). The last failure that counts is returned.
    """
    names = []
    for match in _MISSING.finditer(failure):
        names += [value for value in match.groupdict().values() if value]
    wanted = frozenset().union(*(distribution_candidates(name) for name in names))
    if not wanted:
        return None
    text = _plain(_tail(agent_log or ""))
    recovered = [position for position, name in _recoveries(text) if name in wanted]
    for position, failed, line in sorted(_download_failures(text), reverse=True):
        if failed & wanted and not any(later > position for later in recovered):
            return line
    return None
