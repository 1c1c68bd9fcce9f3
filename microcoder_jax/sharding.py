"""Devices: the mesh, multi-host start-up, the logical-axis rules, host/device transfers.

The only module that knows devices and processes: `make_mesh` / `mesh_from_sizes` build the one
mesh (`mesh_sizes`: its axis sizes, -1 resolved; `sampler_mesh` lays the same devices out for the
paged sampler), `batch_shards` / `rows_split` say how a batch's rows split, `initialize_distributed`
joins a multi-host run, `host_rows` / `allgather_rows` / `allgather_counts` / `to_host` /
`put_batch` move a batch between this host and the global arrays; `describe_host_without_tpu`
keeps libtpu quiet on a machine without TPU chips.
It takes logical axes as input (the model's `param_logical_axes(config)`): it never imports the model.

Mesh axes are ``("data", "fsdp", "tensor")``:

* ``data``   — pure data parallelism (params replicated across it),
* ``fsdp``   — data parallelism with params, grads and optimizer state sharded (ZeRO-3 style),
* ``tensor`` — Megatron-style tensor parallelism over heads / MLP / vocab.

Model code names tensor dimensions with *logical* axes and this module maps them to mesh axes
(``LOGICAL_AXIS_RULES``)::

    batch    -> ("data", "fsdp")   rows of a batch are split over every data-parallel device
    embed    -> "fsdp"             params' hidden dim is FSDP-sharded
    heads, kv_heads, mlp, vocab -> "tensor"
    length, head_dim, layers    -> None (replicated)

Two rules keep any config runnable on any mesh: a mesh axis is used at most once per array
(the first dim that claims it wins, so activations ``[batch, length, embed]`` are split by rows
and keep the hidden dim whole), and a mapping is dropped — the dim is replicated — when the dim
size is not divisible by the mesh axes' size (e.g. ``kv_heads=2`` on ``tensor=4``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Optional, Sequence, TypeVar

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from microcoder_jax.blocks import Block, knob

MESH_AXES = ("data", "fsdp", "tensor")
# A mesh with devices, or an AbstractMesh for device-free plans (plan/).
AnyMesh = TypeVar("AnyMesh", Mesh, jax.sharding.AbstractMesh)


@dataclasses.dataclass(frozen=True)
class MeshConfig(Block):
    """The `mesh.*` block: the training mesh's axis sizes."""

    PREFIX = "mesh"

    data: int = knob(1, "pure data-parallel axis (-1 = all remaining devices)")
    fsdp: int = knob(-1, "FSDP axis: params, grads, optimizer state sharded (-1 = the rest)")
    tensor: int = knob(1, "tensor-parallel axis over heads / MLP / vocab")
    rollout_devices: float = knob(
        0.0,
        "the rollout worker's own devices, a count (>= 1) or a fraction (< 1) of "
        "them, the first ones; the learner's mesh (data, fsdp, tensor) takes the rest "
        "(0 = one mesh for both)",
        at_least=0.0,
    )

    def check(self) -> None:
        sizes = [self.data, self.fsdp, self.tensor]
        if any(s != -1 and s < 1 for s in sizes) or sizes.count(-1) > 1:
            raise ValueError(f"mesh={dict(zip(MESH_AXES, sizes))!r}: sizes are >= 1, at most one is -1")
        if self.rollout_devices >= 1 and self.rollout_devices != int(self.rollout_devices):
            self.fail("rollout_devices", self.rollout_devices, "a count is a whole number (or a fraction below 1)")


def split_devices(rollout_devices: float, devices: Sequence[Any]) -> tuple[list, list]:
    """(the rollout worker's devices, the learner's) for `mesh.rollout_devices` (a count, or a
    fraction below 1, of `devices`, the first ones); ([], devices) when it is 0."""
    devices, value = list(devices), float(rollout_devices or 0)
    n = len(devices)
    r = int(round(value * n)) if 0 < value < 1 else int(value)
    if not value:
        return [], devices
    if not 0 < r < n:
        raise ValueError(
            f"mesh.rollout_devices={rollout_devices:g}: {r} of the {n} devices leaves none for "
            f"the {'learner' if r >= n else 'rollout worker'}; give a count in 1..{n - 1} or a "
            f"fraction"
        )
    return devices[:r], devices[r:]


@dataclasses.dataclass(frozen=True)
class DistributedConfig(Block):
    """The `distributed.*` block: how a multi-host run finds its processes."""

    PREFIX = "distributed"

    initialize: str = knob(
        "auto",
        "multi-host JAX: auto (a cluster JAX detects, or the keys below), always, never",
        choices=("auto", "always", "never"),
    )
    coordinator_address: Optional[str] = knob(None, "host:port of process 0 (None = autodetect)")
    num_processes: Optional[int] = knob(None, "process count (None = autodetect; 1 = single process)", at_least=1)
    process_id: Optional[int] = knob(None, "this process's index (None = autodetect)", at_least=0)


LOGICAL_AXIS_RULES: dict[str, tuple[str, ...] | str | None] = {
    "batch": ("data", "fsdp"),
    "length": None,
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "head_dim": None,
    "mlp": "tensor",
    "vocab": "tensor",
    "layers": None,
}


def mesh_sizes(data: int, fsdp: int, tensor: int, n: int) -> tuple[int, int, int]:
    """The ``(data, fsdp, tensor)`` sizes on `n` devices: the one -1, if any, is all the remaining
    devices, `n` // the fixed axes' product, at least 1 (a mesh then uses the first devices)."""
    sizes = [data, fsdp, tensor]
    if -1 in sizes:
        sizes[sizes.index(-1)] = max(n // math.prod(s for s in sizes if s != -1), 1)
    d, f, t = sizes
    return d, f, t


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1, devices: Sequence[Any] | None = None) -> Mesh:
    """A ``("data", "fsdp", "tensor")`` mesh; one size may be -1 (= all remaining devices)."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got data={data} fsdp={fsdp} tensor={tensor}")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes and len(devices) % known:
        raise ValueError(f"{len(devices)} devices are not divisible by the fixed axes' product {known}")
    sizes = list(mesh_sizes(data, fsdp, tensor, len(devices)))
    if math.prod(sizes) != len(devices):
        raise ValueError(f"mesh {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} devices, have {len(devices)}")
    try:  # topology-aware device order on real TPU/GPU slices
        from jax.experimental import mesh_utils

        grid = mesh_utils.create_device_mesh(sizes, devices=devices)
    except Exception:  # noqa: BLE001 — fake CPU devices or odd shapes: plain order is fine
        grid = np.asarray(devices).reshape(sizes)
    return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def _axis_size(mesh_shape: dict[str, int], axes: tuple[str, ...]) -> int:
    return math.prod(mesh_shape.get(a, 1) for a in axes)


def logical_to_spec(
    logical_axes: Sequence[str | None],
    mesh: Mesh | Any,
    shape: Sequence[int] | None = None,
    rules: dict[str, Any] | None = None,
) -> PartitionSpec:
    """PartitionSpec for one array named by logical axes (see the module doc for the two rules)."""
    rules = LOGICAL_AXIS_RULES if rules is None else rules
    mesh_shape = dict(mesh.shape)
    used: set[str] = set()
    spec = []
    for i, name in enumerate(logical_axes):
        target = rules.get(name) if name is not None else None
        axes = (target,) if isinstance(target, str) else tuple(target or ())
        axes = tuple(a for a in axes if a in mesh_shape and a not in used and mesh_shape[a] > 1)
        if shape is not None and axes and shape[i] % _axis_size(mesh_shape, axes):
            # Try to keep a prefix of the axes that still divides; otherwise replicate.
            while axes and shape[i] % _axis_size(mesh_shape, axes):
                axes = axes[:-1]
        used.update(axes)
        spec.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*spec)


def _is_axes(x) -> bool:
    return isinstance(x, tuple) and all(a is None or isinstance(a, str) for a in x)


def logical_to_sharding(logical_axes_tree, mesh: Mesh, shapes=None, rules: dict[str, Any] | None = None):
    """Pytree of ``NamedSharding`` for a pytree of logical-axis tuples.

    ``shapes`` (optional, same structure: arrays, ShapeDtypeStructs or shape tuples) enables the
    divisibility rule; without it every rule is applied as written.
    """
    if shapes is None:
        return jax.tree.map(
            lambda ax: NamedSharding(mesh, logical_to_spec(ax, mesh, None, rules)), logical_axes_tree, is_leaf=_is_axes
        )
    is_shape = lambda s: isinstance(s, tuple) and all(isinstance(d, int) for d in s)  # noqa: E731
    shape_leaves = jax.tree.leaves(shapes, is_leaf=is_shape)
    axes_leaves, treedef = jax.tree.flatten(logical_axes_tree, is_leaf=_is_axes)
    if len(shape_leaves) != len(axes_leaves):
        raise ValueError(f"shapes has {len(shape_leaves)} leaves, logical axes {len(axes_leaves)}")
    out = [
        NamedSharding(mesh, logical_to_spec(ax, mesh, tuple(getattr(s, "shape", s)), rules))
        for ax, s in zip(axes_leaves, shape_leaves)
    ]
    return jax.tree.unflatten(treedef, out)


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Rows over ``data`` + ``fsdp``, every other dim replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))


def batch_shards(mesh: Mesh | jax.sharding.AbstractMesh | None) -> int:
    """The devices a batch's rows split over: the data axes (data x fsdp, the ``batch`` rule), 1
    without a mesh."""
    return 1 if mesh is None else _axis_size(dict(mesh.shape), ("data", "fsdp"))


def rows_split(mesh: Mesh | jax.sharding.AbstractMesh | None, rows: int) -> bool:
    """Whether `rows` rows are split over the data axes (`put_batch`): when `batch_shards` divides
    them; else every device holds them all (replicated)."""
    return rows % batch_shards(mesh) == 0


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def constrain(x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
    """``with_sharding_constraint`` by logical axes under the active mesh (``jax.set_mesh``); no-op without one."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return x
    spec = logical_to_spec(logical_axes, mesh, x.shape)
    return jax.lax.with_sharding_constraint(x, spec)


def mesh_from_sizes(data: int, fsdp: int, tensor: int, devices: Sequence[Any] | None = None) -> Mesh | None:
    """The run's mesh over the first data * fsdp * tensor devices (-1 = the rest), or None for one
    device (then no sharding machinery runs at all). Given `devices` (a split run's learner's), a
    mesh over them, one device included: its arrays must not land on the default device."""
    sizes = mesh_sizes(data, fsdp, tensor, len(jax.devices() if devices is None else devices))
    total = math.prod(sizes)
    if devices is not None:
        return make_mesh(*sizes, devices=list(devices)[:total])
    if total == 1:
        return None
    return make_mesh(*sizes, devices=jax.devices()[:total])


def sampler_mesh(mesh: AnyMesh | None, tensor: int, kv_heads: int) -> AnyMesh | None:
    """The paged sampler's mesh: ``mesh``'s devices in the same order as ``(data, 1, tensor)``.

    ``tensor`` 0 keeps ``mesh`` as it is; -1 takes the most devices the KV heads split over
    (gcd(devices, kv_heads)), so the page pool and the weights are split, not replicated, over
    them. The rest of the devices split the slots (``data``).
    """
    if mesh is None or tensor == 0:
        return mesh
    n = mesh.size
    t = math.gcd(n, kv_heads) if tensor == -1 else tensor
    if n % t or kv_heads % t:
        raise ValueError(
            f"sampling.decode_tensor={tensor}: {t} must divide both the {n} devices and the "
            f"model's {kv_heads} KV heads; use -1 (the largest that does) or 0 (the training mesh)"
        )
    if t == mesh.shape["tensor"] and mesh.shape["fsdp"] == 1:
        return mesh
    if isinstance(mesh, jax.sharding.AbstractMesh):  # device-free plans
        return jax.sharding.AbstractMesh((n // t, 1, t), MESH_AXES)
    grid = np.asarray(mesh.devices).reshape(n // t, 1, t)
    return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one role runs: its mesh (None: one device, no sharding) and its paged sampler's mesh
    over the same devices (`sampler_mesh`)."""

    mesh: Mesh | None
    sample_mesh: Mesh | None


ROLES = ("learner", "rollout")


def place_roles(cfg: "MeshConfig", decode_tensor: int, kv_heads: int, devices=None) -> dict[str, Placement]:
    """The run's one map from role to devices: {"learner": ..., "rollout": ...}. Without
    `mesh.rollout_devices` both roles share one Placement (the same object); with it the rollout
    worker gets its own devices, FSDP-like over them for the stored params (`split_devices`)."""
    rollout, learner = split_devices(cfg.rollout_devices, jax.devices() if devices is None else devices)
    mesh = mesh_from_sizes(cfg.data, cfg.fsdp, cfg.tensor, devices=learner if rollout else None)
    shared = Placement(mesh, sampler_mesh(mesh, decode_tensor, kv_heads))
    if not rollout:
        return {"learner": shared, "rollout": shared}
    own = make_mesh(1, len(rollout), 1, devices=rollout)
    return {"learner": shared, "rollout": Placement(own, sampler_mesh(own, decode_tensor, kv_heads))}


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Sequence[int] | None = None,
    *,
    mode: str = "auto",
) -> None:
    """Join a multi-process JAX run (call before any other JAX call); a no-op for a single process.

    `mode`: `never` does nothing; `always` initializes (explicit arguments, or JAX's autodetection,
    which errors if there is nothing to join); `auto` initializes with the arguments when any is
    set, else lets JAX detect a cluster (TPU pod slices, SLURM, Open MPI) except on a CPU-only
    platform, and does nothing when nothing is found. Already initialized: nothing to do.
    """
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"distributed.initialize must be auto, always or never, got {mode!r}")
    if mode == "never" or jax.distributed.is_initialized():
        return
    if num_processes is not None and num_processes <= 1:
        return
    if (coordinator_address, num_processes, process_id) != (None, None, None):
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
        )
    elif mode == "always":
        jax.distributed.initialize()
    elif str(jax.config.jax_platforms or "").strip().lower() != "cpu":  # pyright: ignore[reportAttributeAccessIssue]
        try:
            jax.distributed.initialize()  # auto-detect (TPU pods, SLURM, Open MPI)
        except (ValueError, RuntimeError):
            return  # nothing to detect: a single-process run


# ------------------------------------------------------------------ host <-> devices, multi-host


def host_rows(n: int) -> slice:
    """This process's contiguous share of `n` rows (each host judges only its own rows)."""
    per = -(-n // jax.process_count())
    lo = min(jax.process_index() * per, n)
    return slice(lo, min(lo + per, n))


def allgather_rows(arrays: Sequence[np.ndarray], n: int) -> list[np.ndarray]:
    """The global [n, ...] arrays on every host from each host's `host_rows(n)` share."""
    if jax.process_count() == 1:
        return [np.asarray(a) for a in arrays]
    from jax.experimental import multihost_utils

    per = -(-n // jax.process_count())
    padded = [
        np.concatenate([np.asarray(a), np.zeros((per - len(a),) + np.shape(a)[1:], np.asarray(a).dtype)])
        for a in arrays
    ]
    dtypes = [a.dtype for a in padded]
    gathered = multihost_utils.process_allgather(
        [a.astype(np.int32) if a.dtype == bool else a for a in padded], tiled=True
    )
    return [np.asarray(g)[:n].astype(d) for g, d in zip(gathered, dtypes)]


def allgather_counts(counts: dict[str, int], names: Sequence[str] = ()) -> dict[str, int]:
    """Counts summed over hosts; `names` fixes the order of the keys every host knows in advance
    (a key only some hosts saw must be among them, or every host must have seen it)."""
    if jax.process_count() == 1:
        return counts
    from jax.experimental import multihost_utils

    names = list(names) + sorted(set(counts) - set(names))
    local = np.array([counts.get(k, 0) for k in names], np.int32)
    total = np.asarray(multihost_utils.process_allgather(local)).reshape(-1, len(names)).sum(0)
    return {k: int(v) for k, v in zip(names, total) if v}


def assert_same_on_hosts(value: int, what: str) -> None:
    """Raise on every host when the hosts disagree on `value` (e.g. what each read from its disk)."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    seen = np.asarray(multihost_utils.process_allgather(np.array([value], np.int64))).reshape(-1)
    if len(set(seen.tolist())) > 1:
        raise RuntimeError(
            f"the hosts disagree on {what}: {seen.tolist()} by process; every host must see "
            "the same files (a shared workdir, or copy it to each host)"
        )


def to_host(x) -> np.ndarray:
    """A (possibly multi-host, possibly on-device) array as numpy on every host."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def put_batch(batch, mesh: Mesh | None):
    """Host arrays as global arrays with rows over the mesh's data axes (identical on every host).

    Any pytree of arrays. Under several processes a jit spanning all of them needs global arrays,
    not host numpy; a row count the data axes do not divide is replicated. Device arrays pass through.
    """
    if mesh is None:
        return batch

    def put(x):
        if isinstance(x, jax.Array):
            return x
        x = np.asarray(x)
        rows = x.ndim and rows_split(mesh, x.shape[0])
        return jax.device_put(x, batch_sharding(mesh, x.ndim) if rows else replicated(mesh))

    return jax.tree.map(put, batch)


# libtpu off a TPU VM. libtpu loads where there is no TPU chip too: when JAX tries every backend
# (JAX_PLATFORMS unset) and when the planner compiles for a TPU topology ahead of time. Without the
# metadata server it then prints `Failed to find host bounds ... TPU_ACCELERATOR_TYPE` and an
# `E0000 ... worker hostname` line, noise about the missing metadata, not the run. These two
# variables name one local host instead; only the local host's bounds are read from them (an AOT
# compile takes its topology from get_topology_desc: the same programs for v4, v5p, v6e and v5e
# topologies with this value, v4-8 or unset: checked).
NO_TPU_HOST = {"TPU_WORKER_HOSTNAMES": "localhost", "TPU_ACCELERATOR_TYPE": "v5litepod-1"}


def tpu_chips_here() -> int:
    """The TPU chips on this machine's PCI bus (JAX's own test, which reads /sys; 0 off a TPU VM)."""
    try:
        from jax._src import hardware_utils

        return hardware_utils.num_available_tpu_chips_and_device_id()[0]
    except Exception:  # noqa: BLE001 — an older or newer JAX without it: assume a TPU may be here
        return -1


def describe_host_without_tpu() -> None:
    """Before libtpu loads: on a machine with no TPU chip, set NO_TPU_HOST (unset keys only), so
    loading libtpu prints no metadata-server noise; a TPU VM or the user's own settings decide otherwise."""
    if any(k in os.environ for k in NO_TPU_HOST) or tpu_chips_here() != 0:
        return
    for key, value in NO_TPU_HOST.items():
        os.environ.setdefault(key, value)
