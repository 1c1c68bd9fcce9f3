"""The device mesh, its axis names, and the logical-axis rules: the only module that knows the mesh.

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

import math
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

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


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1, devices: Sequence[Any] | None = None) -> Mesh:
    """A ``("data", "fsdp", "tensor")`` mesh; one size may be -1 (= all remaining devices)."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got data={data} fsdp={fsdp} tensor={tensor}")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if len(devices) % known:
            raise ValueError(f"{len(devices)} devices are not divisible by the fixed axes' product {known}")
        sizes[sizes.index(-1)] = len(devices) // known
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


def logical_to_spec(logical_axes: Sequence[str | None], mesh: Mesh | Any, shape: Sequence[int] | None = None,
                    rules: dict[str, Any] | None = None) -> PartitionSpec:
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
        return jax.tree.map(lambda ax: NamedSharding(mesh, logical_to_spec(ax, mesh, None, rules)),
                            logical_axes_tree, is_leaf=_is_axes)
    is_shape = lambda s: isinstance(s, tuple) and all(isinstance(d, int) for d in s)  # noqa: E731
    shape_leaves = jax.tree.leaves(shapes, is_leaf=is_shape)
    axes_leaves, treedef = jax.tree.flatten(logical_axes_tree, is_leaf=_is_axes)
    if len(shape_leaves) != len(axes_leaves):
        raise ValueError(f"shapes has {len(shape_leaves)} leaves, logical axes {len(axes_leaves)}")
    out = [NamedSharding(mesh, logical_to_spec(ax, mesh, tuple(getattr(s, "shape", s)), rules))
           for ax, s in zip(axes_leaves, shape_leaves)]
    return jax.tree.unflatten(treedef, out)


def param_shardings(config, mesh: Mesh):
    """``NamedSharding`` for every parameter of a Qwen3 ``config`` (no allocation)."""
    from microcoder_jax.models import qwen3

    shapes = jax.eval_shape(lambda: qwen3.init_params(config, jax.random.key(0)))
    return logical_to_sharding(qwen3.param_logical_axes(config), mesh, shapes)


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Rows over ``data`` + ``fsdp``, every other dim replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def constrain(x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
    """``with_sharding_constraint`` by logical axes under the active mesh (``jax.set_mesh``); no-op without one."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return x
    spec = logical_to_spec(logical_axes, mesh, x.shape)
    return jax.lax.with_sharding_constraint(x, spec)


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None, local_device_ids: Sequence[int] | None = None) -> None:
    """Join a multi-process JAX run; a no-op for a single process.

    With no arguments on a TPU pod or a SLURM/MPI cluster JAX auto-detects the topology; on CPU/GPU
    hosts pass all three explicitly (``num_processes=1`` or ``None`` everywhere means single process).
    """
    if num_processes is not None and num_processes <= 1:
        return
    if coordinator_address is None and num_processes is None and process_id is None:
        try:
            jax.distributed.initialize()  # auto-detect (TPU pods, SLURM, Open MPI)
        except (ValueError, RuntimeError):
            return  # nothing to detect: a single-process run
        return
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, local_device_ids=local_device_ids)
