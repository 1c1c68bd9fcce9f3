"""The decoder as a Flax NNX module: the same params and the same pure functions as models.decoder.

For Flax and Tunix code: ``Decoder(config, params)`` wraps the arrays of a params dict (from
``init_params``, ``load_hf_params`` or a training checkpoint) as ``nnx.Param`` variables without
copying them, each carrying its logical axes (``param_specs``) as ``out_sharding`` metadata;
calling it runs ``decoder.forward``. ``to_params`` gives the dict back, again without copies, so
the module, ``nnx.Optimizer`` and our optax state, Orbax checkpoints and converters all share one
params tree. Training here stays on the functional core (rl.step): see ARCHITECTURE.md.
For speed, jit over ``nnx.split(model)`` state: ``nnx.jit`` returns the module's whole state, a
copy of every param per call.

    model = Decoder(config, load_hf_params(path, config))
    logits, _ = model(input_ids, attention_mask=mask)
    with jax.set_mesh(mesh):
        nnx.update(model, jax.device_put(model.to_params(), mesh_shardings(model, mesh)))
"""

from __future__ import annotations

import jax
from flax import nnx

from microcoder_jax import sharding
from microcoder_jax.models import decoder
from microcoder_jax.models.decoder import ParamSpec, DecoderConfig


def _param(value, spec: ParamSpec, name: str) -> nnx.Param:
    if tuple(value.shape) != spec.shape:
        raise ValueError(f"param {name} has shape {tuple(value.shape)}, the config needs {spec.shape}")
    return nnx.Param(value, out_sharding=spec.axes, eager_sharding=False)  # no device_put: no copy


class Decoder(nnx.Module):
    """The decoder (any family) over ``embed``, ``layers`` (stacked), ``final_norm`` [and ``lm_head``] Params."""

    def __init__(self, config: DecoderConfig, params: dict | None = None, *, rngs: nnx.Rngs | None = None):
        """Wrap `params` (not copied), or draw fresh ones with ``init_params`` from `rngs`."""
        if params is None:
            if rngs is None:
                raise ValueError(
                    "Decoder needs params (e.g. load_hf_params(path, config)) or rngs=nnx.Rngs(seed) to initialise them"
                )
            params = decoder.init_params(config, rngs.params())
        specs = decoder.param_specs(config)
        if set(params) != set(specs) or set(params["layers"]) != set(specs["layers"]):
            raise ValueError(
                f"params have keys {sorted(params)} / layers {sorted(params['layers'])}; "
                f"the config needs {sorted(specs)} / layers {sorted(specs['layers'])} "
                "(tie_word_embeddings decides whether lm_head exists)"
            )
        self.config = config
        for name, spec in specs.items():
            if name != "layers":
                setattr(self, name, _param(params[name], spec, name))
        self.layers = nnx.Dict(
            {name: _param(params["layers"][name], spec, f"layers.{name}") for name, spec in specs["layers"].items()}
        )

    def to_params(self) -> dict:
        """The params dict of ``models.decoder`` holding this module's arrays (no copies)."""
        return nnx.to_pure_dict(nnx.state(self, nnx.Param))

    def __call__(self, input_ids: jax.Array, **forward_kwargs):
        """``decoder.forward(params, config, input_ids, **forward_kwargs)``: (logits or hidden, cache)."""
        return decoder.forward(self.to_params(), self.config, input_ids, **forward_kwargs)


def logical_axes(model: Decoder) -> dict:
    """Each Param's logical axes, read from its ``out_sharding`` metadata (params-dict structure)."""
    state = nnx.state(model, nnx.Param)
    return nnx.to_pure_dict(
        jax.tree.map(lambda p: p.get_metadata("out_sharding"), state, is_leaf=lambda x: isinstance(x, nnx.Variable))
    )


def mesh_shardings(model: Decoder, mesh: jax.sharding.Mesh) -> dict:
    """``NamedSharding`` per param on `mesh` by sharding.py's rules: what the train step uses."""
    params = model.to_params()
    return sharding.logical_to_sharding(logical_axes(model), mesh, params)


def load_optax_state(optimizer: nnx.Optimizer, opt_state) -> None:
    """Put an optax state over our params dict (e.g. a checkpoint's ``TrainState.opt_state``) into
    an ``nnx.Optimizer`` built with the same transformation and ``wrt=nnx.Param``."""
    nnx.update(optimizer.opt_state, nnx.state(opt_state))


def optax_state(optimizer: nnx.Optimizer, params: dict):
    """The ``nnx.Optimizer``'s state as the optax state over our params dict (arrays not copied)."""
    target = jax.tree.structure(jax.eval_shape(optimizer.tx.init, params))
    return jax.tree.unflatten(target, jax.tree.leaves(nnx.as_pure(optimizer.opt_state)))
