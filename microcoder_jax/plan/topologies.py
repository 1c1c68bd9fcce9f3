"""Accelerators the planner knows: HBM, peak dense bf16 FLOP/s and HBM bandwidth per chip, and
how a user-facing slice name (``v5e-8``) maps to libtpu's AOT topology (``v5e:2x4``).

Figures are the vendors' published per-chip numbers (dense bf16, no sparsity). A v4 or v5p chip
is one JAX device (megacore); their slice names count TensorCores, so ``v4-8`` is 4 chips.

Interconnect (per chip, one direction, bytes/s), from Google's Cloud TPU system-architecture pages
(cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e): ICI v4 2,400 Gbps, v5e 1,600 Gbps (400 GB/s
bidirectional), v5p 4,800 Gbps (1,200 GB/s bidirectional), v6e 3,584 Gbps. DCN (between slices):
v5e 2 x 100 Gbps NICs per 8-chip host (25 Gbps per chip), v5p 50 Gbps per chip; v4 and v6e are
not published per chip there and are taken as v5e's (marked `dcn_assumed`). GPUs: NVLink 600 GB/s
(A100) and 900 GB/s (H100/H200), PCIe 4.0 x16 (32 GB/s) for cards without NVLink; DCN 400 Gbps
InfiniBand/RoCE per GPU (a common cluster NIC, assumed).
"""

from __future__ import annotations

import dataclasses
import re

GIB = 1024**3
HEADROOM = 0.95  # a program "fits" below this share of HBM (runtime buffers, fragmentation)


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
    ici_bandwidth: float = 0.0  # bytes/s per chip, one direction (see the module doc for sources)
    dcn_bandwidth: float = 0.0  # bytes/s per chip between slices / hosts
    dcn_assumed: bool = False  # no published per-chip DCN figure: taken from a similar chip


CHIPS: dict[str, Chip] = {
    "v4": Chip("TPU v4", 32 * GIB, 275e12, 1.2e12, True, 2, 300e9, 3.125e9, True),
    "v5e": Chip("TPU v5e", 16 * GIB, 197e12, 0.819e12, True, 1, 200e9, 3.125e9),
    "v5p": Chip("TPU v5p", 95 * GIB, 459e12, 2.765e12, True, 2, 600e9, 6.25e9),
    "v6e": Chip("TPU v6e", 32 * GIB, 918e12, 1.64e12, True, 1, 448e9, 3.125e9, True),
    "a100-40gb": Chip("A100 40GB", 40 * 10**9, 312e12, 1.555e12, False, 1, 600e9, 50e9, True),
    "a100-80gb": Chip("A100 80GB", 80 * 10**9, 312e12, 2.039e12, False, 1, 600e9, 50e9, True),
    "h100": Chip("H100 SXM", 80 * 10**9, 989e12, 3.35e12, False, 1, 900e9, 50e9, True),
    "h200": Chip("H200", 141 * 10**9, 989e12, 4.8e12, False, 1, 900e9, 50e9, True),
    "l4": Chip("L4", 24 * 10**9, 121e12, 0.3e12, False, 1, 32e9, 50e9, True),
    "rtx4090": Chip("RTX 4090", 24 * 10**9, 165e12, 1.008e12, False, 1, 32e9, 50e9, True),
}

# The slice sizes Google offers (chips) and libtpu's grid for each: v5e / v6e are 2D (their names
# count chips: v5litepod-1, -4, -8, ... -256), v4 / v5p 3D (names count cores, two per chip).
_GRIDS_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
_GRIDS_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4), 128: (4, 4, 8)}


def slice_names(family: str) -> list[str]:
    """The user-facing slice names the planner accepts for one TPU family (``v5e-1`` ... ``v5e-256``)."""
    chip = CHIPS[family]
    grids = _GRIDS_3D if chip.cores_per_chip > 1 else _GRIDS_2D
    return [f"{family}-{chips * chip.cores_per_chip}" for chips in grids]


@dataclasses.dataclass(frozen=True)
class Topology:
    name: str  # as the user wrote it
    chip: Chip
    num_devices: int
    aot_name: str | None  # libtpu topology, e.g. "v5e:2x4"; None = analytic only
    slices: int = 1  # multi-slice (DCN between slices), e.g. "v5e-8x2"

    @property
    def platform(self) -> str:
        """What the run compiles for: "tpu", "gpu" (a named GPU) or "cpu" (an unnamed device:
        --devices N --hbm-gib X, planned with the XLA paths)."""
        if self.chip.tpu:
            return "tpu"
        return "gpu" if any(c.name == self.chip.name for c in CHIPS.values() if not c.tpu) else "cpu"

    def devices(self):
        """libtpu's AOT devices of this topology (JAX_PLATFORMS=cpu is enough; nothing allocated).
        A single chip needs chips_per_host_bounds (1, 1, 1): libtpu's default host is 2x2x1."""
        from jax.experimental import topologies

        from microcoder_jax.sharding import describe_host_without_tpu

        describe_host_without_tpu()  # libtpu loads here: off a TPU VM, without metadata-server noise
        assert self.aot_name is not None, "an analytic-only topology has no devices"
        kwargs: dict = {"chip_config_name": "megacore"} if self.chip.cores_per_chip > 1 else {}
        if self.num_devices // self.slices == 1:
            kwargs["chips_per_host_bounds"] = (1, 1, 1)
        if self.slices > 1:
            kwargs["num_slices"] = self.slices
        return topologies.get_topology_desc(topology_name=self.aot_name, platform="tpu", **kwargs).devices


def _known() -> str:
    slices = "; ".join(", ".join(slice_names(f)) for f in ("v4", "v5e", "v5p", "v6e"))
    return (
        f"{slices} (v5litepod-N = v5e-N; NAMExK = K slices over DCN, e.g. v5e-8x2); libtpu names like "
        f"v5e:2x2 or v4:2x2x1; or a GPU / other chip with --devices N "
        f"({', '.join(k for k, c in CHIPS.items() if not c.tpu)}) or --devices N --hbm-gib X"
    )


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
    m = re.fullmatch(r"(v4|v5e|v5p|v6e|v5litepod)-(\d+)(?:x(\d+))?", key)
    if m:
        family = "v5e" if m[1] == "v5litepod" else m[1]
        chip = CHIPS[family]
        cores, slices = int(m[2]), int(m[3] or 1)
        grids = _GRIDS_3D if chip.cores_per_chip > 1 else _GRIDS_2D
        chips = cores // chip.cores_per_chip
        if cores % chip.cores_per_chip or chips not in grids or slices < 1:
            counts = "cores, 2 per chip" if chip.cores_per_chip > 1 else "chips"
            raise TopologyError(
                f"unknown topology {name!r}: {family} slices are {', '.join(slice_names(family))}"
                f" (a {family} name counts {counts}); known: {_known()}"
            )
        return Topology(name, chip, chips * slices, f"{family}:{'x'.join(map(str, grids[chips]))}", slices)
    m = re.fullmatch(r"(v4|v5e|v5p|v6e):(\d+(?:x\d+)+)", key)
    if m:
        chip = CHIPS[m[1]]
        chips = 1
        for d in m[2].split("x"):
            chips *= int(d)
        return Topology(name, chip, chips, key)
    raise TopologyError(f"unknown topology {name!r}; known: {_known()}")
