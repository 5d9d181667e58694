"""Probe (C2): does the framework in this interpreter see the GPU, and which CUDA was it built for?

Tries torch, then JAX, then TensorFlow; the first that imports is measured. Prints one JSON object
(its last line). Exit status 0 even when nothing imports: the judge decides, not the probe.
"""
import json
import sys
import traceback


def measure_torch():
    import torch

    available = bool(torch.cuda.is_available())
    count = torch.cuda.device_count() if available else 0
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    capabilities = ["%d.%d" % torch.cuda.get_device_capability(i) for i in range(count)]
    smoke = None
    if available:
        # A real kernel launch: catches builds that import but have no kernel for this GPU.
        x = torch.ones(8, device="cuda")
        smoke = float((x * 2).sum().item())
    nccl = None
    try:
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version()) if available else None
    except Exception:
        nccl = None
    return {
        "framework": "torch",
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": available,
        "device_count": count,
        "devices": names,
        "capabilities": capabilities,
        "arch_list": list(torch.cuda.get_arch_list()) if available else [],
        "smoke_sum": smoke,
        "nccl": nccl,
    }


def measure_jax():
    import jax

    devices = [d for d in jax.devices() if d.platform == "gpu"]
    cuda_build = None
    try:
        from jax._src.lib import cuda_versions  # noqa: F401
        cuda_build = str(cuda_versions.cuda_runtime_get_version())
    except Exception:
        cuda_build = None
    return {
        "framework": "jax",
        "version": jax.__version__,
        "cuda_build": cuda_build,
        "cuda_available": bool(devices),
        "device_count": len(devices),
        "devices": [str(d.device_kind) for d in devices],
    }


def measure_tensorflow():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    build = tf.sysconfig.get_build_info()
    return {
        "framework": "tensorflow",
        "version": tf.__version__,
        "cuda_build": build.get("cuda_version"),
        "cuda_available": bool(gpus),
        "device_count": len(gpus),
        "devices": [g.name for g in gpus],
    }


def main():
    attempts = []
    for name, measure in (("torch", measure_torch), ("jax", measure_jax), ("tensorflow", measure_tensorflow)):
        try:
            result = measure()
        except ImportError as error:
            attempts.append({"framework": name, "error": "%s: %s" % (type(error).__name__, error)})
            continue
        except Exception as error:
            traceback.print_exc()
            result = {"framework": name, "error": "%s: %s" % (type(error).__name__, error),
                      "cuda_available": False}
        result["tried"] = attempts
        print(json.dumps(result))
        return
    print(json.dumps({"framework": None, "tried": attempts}))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
