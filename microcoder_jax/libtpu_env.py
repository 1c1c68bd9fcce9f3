"""libtpu's host description on a machine without TPU chips, so loading it there prints nothing.

On a TPU VM the metadata server tells libtpu the accelerator type and the worker hostnames. Where
there is no TPU chip (a laptop, a CPU VM, a GPU box) libtpu still loads: when JAX tries every
backend (JAX_PLATFORMS unset) and when the planner compiles for a TPU topology ahead of time. It
then prints `Failed to find host bounds for accelerator type ... TPU_ACCELERATOR_TYPE` and an
`E0000 ... common_lib.cc:554] INVALID_ARGUMENT ... worker hostname` line. Both are about the
missing metadata, not about the run: this module sets the two variables to one local host first.
"""
from __future__ import annotations

import os

# Read only for the local host's bounds; an AOT compile takes its topology from get_topology_desc
# (the same programs for v4, v5p, v6e and v5e topologies with this value, v4-8 or unset: checked).
NO_TPU_HOST = {"TPU_WORKER_HOSTNAMES": "localhost", "TPU_ACCELERATOR_TYPE": "v5litepod-1"}


def tpu_chips_here() -> int:
    """The TPU chips on this machine's PCI bus (JAX's own test, which reads /sys; 0 off a TPU VM)."""
    try:
        from jax._src import hardware_utils

        return hardware_utils.num_available_tpu_chips_and_device_id()[0]
    except Exception:  # noqa: BLE001 — an older or newer JAX without it: assume a TPU may be here
        return -1


def describe_host_without_tpu() -> None:
    """Before libtpu loads: on a machine with no TPU chip, name one local host (unset keys only)."""
    if any(k in os.environ for k in NO_TPU_HOST) or tpu_chips_here() != 0:
        return  # a TPU VM (its metadata) or the user's own settings decide
    for key, value in NO_TPU_HOST.items():
        os.environ.setdefault(key, value)
