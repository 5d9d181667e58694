"""Probe (C2, C5): every deep-learning framework of this interpreter - torch, JAX, TensorFlow - each
with the CUDA it was built for and the GPUs it sees.

Every framework is observed, not only the first that imports: an environment may hold several, and a
claim about any of them must be checked against that one. Each is measured in a child process of this
interpreter (this script with ``--one NAME``), so that one framework's crash, its GPU memory
preallocation (JAX) or its process-wide CUDA state cannot spoil another's observation.

Prints one JSON object as its last line::

    {"frameworks": {"torch": ENTRY, "jax": ENTRY, "tensorflow": ENTRY}}

ENTRY: ``installed`` (a module of that name is found on the path), ``importable`` (``import NAME``
succeeded), ``version`` (the module's ``__version__``; the distribution's version when the import
failed), ``cuda_build`` (the CUDA version it was built for; null for a CPU build), ``cuda_available``,
``device_count``, ``devices``, ``error`` (``"Type: message"`` of what failed, or null) and
framework-specific details. A value that was not measured (the measurement failed before it) is null.
Exit status 0 even when nothing imports: the judge decides, not the probe.

Standard library only, Python 3.6 syntax: it runs with the agent's interpreter, whatever that is.
"""
import importlib
import json
import os
import subprocess
import sys
import traceback

FRAMEWORKS = ("torch", "jax", "tensorflow")
DISTRIBUTIONS = {
    "torch": ("torch",),
    "jax": ("jax",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tensorflow-intel",
                   "tensorflow-macos"),
}


def describe(error):
    return "%s: %s" % (type(error).__name__, error)


def found(name):
    """Whether a top-level module `name` is on the path, without importing it."""
    try:
        import importlib.util
        return importlib.util.find_spec(name) is not None
    except Exception:
        return name in sys.modules


def distribution_version(name):
    """The installed distribution's version, read from its metadata (no import); None if unknown."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        try:
            import importlib_metadata as metadata
        except ImportError:
            return None
    for dist in DISTRIBUTIONS.get(name, (name,)):
        try:
            return str(metadata.version(dist))
        except Exception:
            continue
    return None


def cuda_text(value):
    """A CUDA version as major.minor; CUDA's own integers (12030) are decoded."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return "%d.%d" % (value // 1000, (value % 1000) // 10) if value >= 1000 else str(value)
    return str(value)


def measure_torch(torch, entry):
    entry["cuda_build"] = cuda_text(torch.version.cuda)
    available = bool(torch.cuda.is_available())
    entry["cuda_available"] = available
    count = int(torch.cuda.device_count()) if available else 0
    entry["device_count"] = count
    entry["devices"] = [str(torch.cuda.get_device_name(i)) for i in range(count)]
    entry["capabilities"] = ["%d.%d" % torch.cuda.get_device_capability(i) for i in range(count)]
    entry["arch_list"] = [str(arch) for arch in torch.cuda.get_arch_list()] if available else []
    try:
        entry["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version()) if available else None
    except Exception:
        entry["nccl"] = None
    if available:
        # A real kernel launch: catches builds that import but have no kernel for this GPU.
        x = torch.ones(8, device="cuda")
        entry["smoke_sum"] = float((x * 2).sum().item())


def jax_cuda_build(jax):
    try:
        from jax._src.lib import cuda_versions
        if cuda_versions is not None:
            return cuda_text(cuda_versions.cuda_runtime_get_version())
    except Exception:
        pass
    for major in ("13", "12", "11"):
        if found("jax_cuda%s_plugin" % major) or found("jax_cuda%s_pjrt" % major):
            return major
    try:
        import jaxlib
        local = str(jaxlib.__version__).partition("+")[2]  # old jaxlib wheels: 0.4.7+cuda11.cudnn86
        if local.startswith("cuda"):
            return local[4:].split(".")[0] or None
    except Exception:
        pass
    return None


def measure_jax(jax, entry):
    entry["cuda_build"] = jax_cuda_build(jax)
    devices = [d for d in jax.devices() if d.platform == "gpu"]
    entry["cuda_available"] = bool(devices)
    entry["device_count"] = len(devices)
    entry["devices"] = [str(d.device_kind) for d in devices]


def measure_tensorflow(tf, entry):
    build = tf.sysconfig.get_build_info()
    entry["cuda_build"] = cuda_text(build.get("cuda_version"))
    gpus = tf.config.list_physical_devices("GPU")
    entry["cuda_available"] = bool(gpus)
    entry["device_count"] = len(gpus)
    entry["devices"] = [str(g.name) for g in gpus]


MEASURE = {"torch": measure_torch, "jax": measure_jax, "tensorflow": measure_tensorflow}


def blank(name):
    return {"name": name, "installed": False, "importable": False, "version": None, "cuda_build": None,
            "cuda_available": None, "device_count": None, "devices": [], "error": None}


def measure(name):
    """One framework, in this process: import it, then fill in what can be measured."""
    entry = blank(name)
    try:
        module = importlib.import_module(name)
    except BaseException as error:  # ImportError, OSError for a missing CUDA library, SystemExit, ...
        entry["installed"] = found(name)
        if entry["installed"]:  # a broken install: its traceback is worth the log; a missing one is not
            traceback.print_exc()
        entry["version"] = distribution_version(name) if entry["installed"] else None
        entry["error"] = describe(error)
        return entry
    entry["installed"] = entry["importable"] = True
    version = getattr(module, "__version__", None)
    entry["version"] = str(version) if version is not None else distribution_version(name)
    try:
        MEASURE[name](module, entry)
    except BaseException as error:
        traceback.print_exc()
        entry["error"] = describe(error)
    return entry


def measure_in_child(name):
    """`measure(name)` in a child process; a child that dies without an answer is recorded as such."""
    argv = [sys.executable or "python3", "-B", os.path.abspath(__file__), "--one", name]
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE)
        out, _ = child.communicate()
    except OSError as error:
        entry = blank(name)
        entry["installed"] = found(name)
        entry["error"] = "cannot start the measuring process: %s" % describe(error)
        return entry
    lines = [line for line in out.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        entry = json.loads(lines[-1])
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    except (IndexError, ValueError):
        pass
    entry = blank(name)
    entry["installed"] = found(name)
    entry["version"] = distribution_version(name) if entry["installed"] else None
    entry["error"] = "importing %s killed the process (exit status %s) before it answered" % (name, child.returncode)
    return entry


def main(argv):
    if len(argv) == 3 and argv[1] == "--one" and argv[2] in MEASURE:
        print(json.dumps(measure(argv[2])))
        return
    print(json.dumps({"frameworks": dict((name, measure_in_child(name)) for name in FRAMEWORKS)}))


if __name__ == "__main__":
    main(sys.argv)
    sys.stdout.flush()
