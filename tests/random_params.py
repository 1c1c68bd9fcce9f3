"""Random tiny-model params built in NumPy (no threefry compile): norms 1, matrices N(0, scale)."""

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import models


def numpy_params(model_config, scale: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    shapes = models.param_shapes(model_config)
    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(d, int) for d in x)  # noqa: E731
    flat, treedef = jax.tree_util.tree_flatten_with_path(shapes, is_leaf=is_shape)
    leaves = [
        np.ones(s, np.float32)
        if "norm" in jax.tree_util.keystr(p)
        else (scale * rng.standard_normal(s)).astype(np.float32)
        for p, s in flat
    ]
    return jax.tree.map(jnp.asarray, jax.tree.unflatten(treedef, leaves))
