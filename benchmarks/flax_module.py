"""The Flax NNX decoder against the functional core it wraps: same weights, same shapes.

    python benchmarks/flax_module.py [--layers 2] [--vocab 16384] [--batch 4] [--seq 256] [--reps 5]

Times a prefill on Qwen3-0.6B layer shapes cut to a few layers (fp32), and a 1-token call on the
"tiny" preset (where per-call Python overhead shows), three ways: `jax.jit(forward)` on the
params dict, `nnx.jit` on the module, and `jax.jit` over `nnx.split`'s state merged inside
(Flax's fast pattern). Prints best and median ms per call; all three must give the same logits.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from microcoder_jax import models
from microcoder_jax.models.flax_decoder import Decoder


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def times(fns, reps: int) -> list[tuple[float, float]]:
    """(best, median) seconds of each function; rounds interleave them so load hits all alike."""
    for fn in fns:
        fn()  # compile
    rounds = [[_seconds(fn) for fn in fns] for _ in range(reps)]
    return [(min(col), float(np.median(col))) for col in zip(*rounds)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    big = models.get_preset("qwen3-0.6b", num_layers=a.layers, vocab_size=a.vocab, dtype="float32", remat="none")
    rows = []
    for name, config, shape, reps in (
        ("prefill", big, (a.batch, a.seq), a.reps),
        ("1 token", models.get_preset("tiny", dtype="float32", remat="none"), (1, 1), 100 * a.reps),
    ):
        params = models.init_params(config, jax.random.key(0))
        model = Decoder(config, params)
        graphdef, state = nnx.split(model)
        functional = jax.jit(lambda p, ids, c=config: models.forward(p, c, ids)[0])
        module = nnx.jit(lambda m, ids: m(ids)[0])
        split = jax.jit(lambda s, ids, g=graphdef: nnx.merge(g, s)(ids)[0])
        ids = jnp.asarray(np.random.RandomState(0).randint(0, config.vocab_size, shape))
        outs = [functional(params, ids), module(model, ids), split(state, ids)]
        for o in outs[1:]:
            np.testing.assert_allclose(np.asarray(o), np.asarray(outs[0]), rtol=1e-6, atol=1e-6)
        fns = [
            lambda: functional(params, ids).block_until_ready(),
            lambda: module(model, ids).block_until_ready(),
            lambda: split(state, ids).block_until_ready(),
        ]
        rows.append((name, shape, times(fns, reps)))

    print(
        f"{jax.devices()[0].platform}; prefill: {a.layers} layers of Qwen3-0.6B shape, vocab {a.vocab}; "
        "1 token: the tiny preset; fp32; ms per call, best / median"
    )
    print(f"{'call':<10}{'shape':<12}{'jax.jit(forward)':>20}{'nnx.jit(module)':>20}{'jit(split state)':>20}")
    for name, shape, cols in rows:
        cells = "".join(f"{f'{b * 1e3:.2f} / {m * 1e3:.2f}':>20}" for b, m in cols)
        print(f"{name:<10}{str(shape):<12}{cells}")


if __name__ == "__main__":
    main()
