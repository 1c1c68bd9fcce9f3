"""MicroCoder-GRPO in JAX: RL for Qwen3 code models on TPUs, GPUs and CPUs."""
import glob as _glob
import importlib.util as _util
import os as _os
import sys as _sys

__version__ = "0.1.0"


def _no_tpu_probe_without_a_tpu() -> None:
    """On a Linux machine with no TPU chip and no CUDA plugin, run JAX on the CPU.

    libtpu (installed by the [test] and [tpu] extras) otherwise probes the cloud metadata server at
    JAX's first backend start and prints 'Failed to find host bounds ...' and an E0000 worker-hostname
    line on every CPU run. A chip (/dev/accel*, /dev/vfio), TPU_* settings or an explicit
    JAX_PLATFORMS leave JAX's own choice alone; AOT compiles for TPU topologies work either way.
    """
    if "JAX_PLATFORMS" in _os.environ or not _sys.platform.startswith("linux") or "jax" in _sys.modules:
        return
    if _glob.glob("/dev/accel*") or _os.path.isdir("/dev/vfio") or any(k.startswith("TPU_") for k in _os.environ):
        return
    if any(_util.find_spec(name) for name in ("jax_cuda12_plugin", "jax_cuda13_plugin")):
        return
    _os.environ["JAX_PLATFORMS"] = "cpu"


_no_tpu_probe_without_a_tpu()
