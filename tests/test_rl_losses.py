"""rl.losses against NumPy references written from the formulas."""

import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.rl import advantages as A, losses as L


def ref_surrogate(logp, old, adv, el, eh, dual):
    ratio = np.exp(logp - old)
    loss = -np.minimum(ratio * adv, np.clip(ratio, 1 - el, 1 + eh) * adv)
    if dual is not None:
        loss = np.where(adv < 0, np.minimum(loss, -dual * adv), loss)
    return loss, ratio


@pytest.mark.parametrize("dual", [None, 3.0])
def test_clipped_surrogate(dual):
    rng = np.random.default_rng(0)
    logp = rng.normal(-2, 1, (6, 9))
    old = logp + rng.normal(0, 0.5, (6, 9))
    adv = rng.normal(0, 1, (6, 1))
    adv[0] = 0.0
    loss, ratio, lo, hi = L.clipped_surrogate(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv), 0.2, 0.28, dual)
    want, want_ratio = ref_surrogate(logp, old, adv, 0.2, 0.28, dual)
    np.testing.assert_allclose(np.asarray(loss), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ratio), want_ratio, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(lo), (want_ratio < 0.8) & (adv < 0))
    np.testing.assert_array_equal(np.asarray(hi), (want_ratio > 1.28) & (adv > 0))
    assert np.asarray(lo).any() and np.asarray(hi).any()
    if dual is not None:  # the dual clip bounds the loss of negative-advantage tokens
        assert np.all(np.asarray(loss) <= -dual * np.minimum(adv, 0) + 1e-6)


def test_clipped_surrogate_gradient_zero_where_clipped():
    import jax

    adv = jnp.array([[1.0], [-1.0], [1.0]])
    old = jnp.zeros((3, 1))
    logp = jnp.log(jnp.array([[1.5], [0.5], [1.1]]))  # high-clipped, low-clipped, inside
    g = jax.grad(lambda lp: L.clipped_surrogate(lp, old, adv, 0.2, 0.28)[0].sum())(logp)
    np.testing.assert_allclose(np.asarray(g)[:, 0], [0.0, 0.0, -1.1], rtol=1e-6)


def test_k3_kl():
    rng = np.random.default_rng(1)
    logp, ref = rng.normal(-2, 1, 50), rng.normal(-2, 1, 50)
    got = np.asarray(L.k3_kl(jnp.asarray(logp), jnp.asarray(ref)))
    np.testing.assert_allclose(got, np.exp(ref - logp) - (ref - logp) - 1, rtol=1e-5, atol=1e-6)
    assert np.all(got >= 0)
    assert float(L.k3_kl(jnp.asarray(logp), jnp.asarray(logp)).max()) == 0.0


def ref_aggregate(x, mask, mode, constant, budget):
    if mode == "token_mean":
        return (x * mask).sum() / mask.sum()
    if mode == "seq_mean_token_mean":
        per_row = [(x[i] * mask[i]).sum() / mask[i].sum() for i in range(len(x)) if mask[i].sum()]
        return np.mean(per_row)
    return (x * mask).sum() / (len(x) * (budget if constant is None else constant))


def layout_mask(rng, rows=5, prompt=4, max_new=7):
    """A response mask in the batch layout: responses start at column `prompt`, right-padded."""
    lengths = rng.integers(1, max_new + 1, rows)
    lengths[2] = 0  # an empty response: excluded from the seq-mean, counted by the constant mode
    cols = np.arange(prompt + max_new)[None, :]
    return ((cols >= prompt) & (cols < prompt + lengths[:, None])).astype(np.float32)


@pytest.mark.parametrize(
    "mode,constant", [("token_mean", None), ("seq_mean_token_mean", None), ("constant", None), ("constant", 100.0)]
)
def test_loss_weights_match_formulas(mode, constant):
    rng = np.random.default_rng(2)
    mask = layout_mask(rng)
    x = rng.normal(size=mask.shape)
    got = float(jnp.sum(jnp.asarray(x) * L.loss_weights(jnp.asarray(mask), mode, constant)))
    np.testing.assert_allclose(got, ref_aggregate(x, mask, mode, constant, budget=7), rtol=1e-5)


def test_constant_mode_normalises_by_generation_budget_not_prompt_bucket():
    """Dr.GRPO's constant is max_new_tokens: a wider prompt bucket must not change the loss."""
    rng = np.random.default_rng(4)
    mask = layout_mask(rng, prompt=4)
    x = rng.normal(size=mask.shape)
    wide = lambda a: np.pad(a, ((0, 0), (9, 0)))  # the same rows in a 13-column prompt bucket
    loss = lambda x, m: float(jnp.sum(jnp.asarray(x) * L.loss_weights(jnp.asarray(m), "constant")))
    np.testing.assert_allclose(loss(wide(x), wide(mask)), loss(x, mask), rtol=1e-6)
    np.testing.assert_allclose(loss(x, mask), (x * mask).sum() / (5 * 7), rtol=1e-5)
    assert int(A.generation_budget(jnp.asarray(wide(mask)))) == 7
    assert int(A.generation_budget(jnp.zeros((3, 6)))) == 6  # no response at all: the width


def test_all_empty_mask_gives_zero_not_nan():
    x, mask = jnp.ones((3, 4)), jnp.zeros((3, 4))
    for mode in ("token_mean", "seq_mean_token_mean", "constant"):
        assert float(jnp.sum(x * L.loss_weights(mask, mode))) == 0.0
