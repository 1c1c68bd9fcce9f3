"""A CPU run with libtpu installed prints none of libtpu's metadata-probe noise, and an explicit
JAX_PLATFORMS (or a TPU setting) is left as the user gave it."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = "import microcoder_jax, os, jax; jax.devices(); print(os.environ.get('JAX_PLATFORMS'))"


def _run(**env):
    base = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS" and not k.startswith("TPU_")}
    proc = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.path.exists("/dev/accel0")
                    or os.path.isdir("/dev/vfio"), reason="a TPU chip is here: JAX should probe it")
def test_no_libtpu_noise_on_a_machine_without_a_tpu():
    proc = _run()
    assert proc.stdout.strip() == "cpu"
    for noise in ("Failed to find host bounds", "E0000", "TPU_WORKER_HOSTNAMES"):
        assert noise not in proc.stderr, proc.stderr


def test_an_explicit_platform_choice_is_kept():
    assert _run(JAX_PLATFORMS="cpu").stdout.strip() == "cpu"
    proc = subprocess.run([sys.executable, "-c", "import os; os.environ['TPU_ACCELERATOR_TYPE'] = 'v5e-8'; "
                           "os.environ.pop('JAX_PLATFORMS', None); import microcoder_jax; "
                           "print(os.environ.get('JAX_PLATFORMS'))"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "None", proc.stderr
