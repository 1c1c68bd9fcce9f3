"""rl.losses against NumPy references written from the formulas."""
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.rl import losses as L


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
    loss, ratio, lo, hi = L.clipped_surrogate(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                                              0.2, 0.28, dual)
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


def ref_aggregate(x, mask, mode, constant):
    if mode == "token_mean":
        return (x * mask).sum() / mask.sum()
    if mode == "seq_mean_token_mean":
        per_row = [(x[i] * mask[i]).sum() / mask[i].sum() for i in range(len(x)) if mask[i].sum()]
        return np.mean(per_row)
    return (x * mask).sum() / (len(x) * (x.shape[1] if constant is None else constant))


@pytest.mark.parametrize("mode,constant", [("token_mean", None), ("seq_mean_token_mean", None),
                                           ("constant", None), ("constant", 100.0)])
def test_aggregate(mode, constant):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 11))
    mask = (rng.random((5, 11)) < 0.6).astype(np.float32)
    mask[2] = 0  # an empty response: excluded from the seq-mean, counted by the constant mode
    got = float(L.aggregate(jnp.asarray(x), jnp.asarray(mask), mode, constant))
    np.testing.assert_allclose(got, ref_aggregate(x, mask, mode, constant), rtol=1e-5)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "constant"])
def test_split_aggregation_sums_to_whole(mode):
    """Micro-batch sums over the global normaliser add up to the whole-batch aggregate."""
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(8, 7)))
    mask = jnp.asarray((rng.random((8, 7)) < 0.5).astype(np.float32))
    norm = L.loss_normaliser(mask, mode)
    parts = sum(jnp.sum(x[i:i + 2] * L.token_weights(mask[i:i + 2], mode)) / norm
                for i in range(0, 8, 2))
    np.testing.assert_allclose(float(parts), float(L.aggregate(x, mask, mode)), rtol=1e-5)


def test_all_empty_mask_gives_zero_not_nan():
    x, mask = jnp.ones((3, 4)), jnp.zeros((3, 4))
    for mode in ("token_mean", "seq_mean_token_mean", "constant"):
        assert float(L.aggregate(x, mask, mode)) == 0.0
