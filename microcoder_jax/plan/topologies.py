"""Accelerators the planner knows: HBM, peak dense bf16 FLOP/s and HBM bandwidth per chip, and
how a user-facing slice name (``v5e-8``) maps to libtpu's AOT topology (``v5e:2x4``).

Figures are the vendors' published per-chip numbers (dense bf16, no sparsity). A v4 or v5p chip
is one JAX device (megacore); their slice names count TensorCores, so ``v4-8`` is 4 chips.
"""
from __future__ import annotations

import dataclasses
import re

GIB = 1024 ** 3


class TopologyError(ValueError):
    """An unknown topology name (the message lists the known ones)."""


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    hbm_bytes: int
    peak_flops: float  # dense bf16 FLOP/s
    hbm_bandwidth: float  # bytes/s
    tpu: bool  # compiled against libtpu's AOT topology; otherwise analytic only
    cores_per_chip: int = 1  # TensorCores counted by the slice name (v4 / v5p: 2)


CHIPS: dict[str, Chip] = {
    "v4": Chip("TPU v4", 32 * GIB, 275e12, 1.2e12, True, 2),
    "v5e": Chip("TPU v5e", 16 * GIB, 197e12, 0.819e12, True),
    "v5p": Chip("TPU v5p", 95 * GIB, 459e12, 2.765e12, True, 2),
    "v6e": Chip("TPU v6e", 32 * GIB, 918e12, 1.64e12, True),
    "a100-40gb": Chip("A100 40GB", 40 * 10 ** 9, 312e12, 1.555e12, False),
    "a100-80gb": Chip("A100 80GB", 80 * 10 ** 9, 312e12, 2.039e12, False),
    "h100": Chip("H100 SXM", 80 * 10 ** 9, 989e12, 3.35e12, False),
    "h200": Chip("H200", 141 * 10 ** 9, 989e12, 4.8e12, False),
    "l4": Chip("L4", 24 * 10 ** 9, 121e12, 0.3e12, False),
    "rtx4090": Chip("RTX 4090", 24 * 10 ** 9, 165e12, 1.008e12, False),
}

# Chip grids of the common single-host slices (chips, not cores).
_GRIDS = {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 4, 1)}


@dataclasses.dataclass(frozen=True)
class Topology:
    name: str  # as the user wrote it
    chip: Chip
    num_devices: int
    aot_name: str | None  # libtpu topology, e.g. "v5e:2x4"; None = analytic only

    def devices(self):
        """libtpu's AOT devices of this topology (JAX_PLATFORMS=cpu is enough; nothing allocated)."""
        from jax.experimental import topologies

        assert self.aot_name is not None, "an analytic-only topology has no devices"
        kwargs = {"chip_config_name": "megacore"} if self.chip.cores_per_chip > 1 else {}
        return topologies.get_topology_desc(topology_name=self.aot_name, platform="tpu", **kwargs).devices


def _known() -> str:
    return ("v4-8, v5e-8, v5p-8, v6e-8 (any -N), libtpu names like v5e:2x2 or v4:2x2x1, "
            f"or a GPU / other chip with --devices N ({', '.join(k for k, c in CHIPS.items() if not c.tpu)}) "
            "or --devices N --hbm-gib X")


def parse_topology(name: str | None, devices: int | None = None, hbm_gib: float | None = None) -> Topology:
    """``v5e-8`` / ``v5e:2x4`` / ``h100`` + devices / devices + hbm_gib -> a Topology."""
    if not name:
        if devices and hbm_gib:
            chip = Chip(f"{hbm_gib:g} GiB device", int(hbm_gib * GIB), 0.0, 0.0, False)
            return Topology(f"{devices}x{hbm_gib:g}GiB", chip, devices, None)
        raise TopologyError(f"give --topology NAME or --devices N --hbm-gib X; known: {_known()}")
    key = name.strip().lower()
    if key in CHIPS and not CHIPS[key].tpu:
        if not devices:
            raise TopologyError(f"{name} needs --devices N (chips in the run)")
        chip = CHIPS[key]
        if hbm_gib:
            chip = dataclasses.replace(chip, hbm_bytes=int(hbm_gib * GIB))
        return Topology(f"{devices}x{name}", chip, devices, None)
    m = re.fullmatch(r"(v4|v5e|v5p|v6e|v5litepod)-(\d+)", key)
    if m:
        chip = CHIPS["v5e" if m[1] == "v5litepod" else m[1]]
        cores = int(m[2])
        chips = max(cores // chip.cores_per_chip, 1)
        if chips not in _GRIDS:
            raise TopologyError(f"{name}: only single-host slices (1, 2, 4 or 8 chips) have a built-in grid; "
                                f"pass libtpu's name instead, e.g. {m[1]}:4x4")
        grid = _GRIDS[chips]
        dims = "x".join(map(str, grid if chip.cores_per_chip > 1 else grid[:2]))
        return Topology(name, chip, chips, f"{m[1].replace('v5litepod', 'v5e')}:{dims}")
    m = re.fullmatch(r"(v4|v5e|v5p|v6e):(\d+(?:x\d+)+)", key)
    if m:
        chip = CHIPS[m[1]]
        chips = 1
        for d in m[2].split("x"):
            chips *= int(d)
        return Topology(name, chip, chips, key)
    raise TopologyError(f"unknown topology {name!r}; known: {_known()}")
