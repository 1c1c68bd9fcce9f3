"""Sequence packing: the host-side packer, segment-id attention and packed log-probs = padded."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax import models, sharding
from microcoder_jax.models import attention as attn_lib
from microcoder_jax.rl import packing
from microcoder_jax.rl.logprobs import compute_logprobs
from random_params import numpy_params

MC = models.get_preset("tiny", dtype="float32")
P, R = 6, 12
S = P + R


def make_rows(n, seed=0, prompt_min=1, full=()):
    """Left-padded prompts, right-padded responses (rows in `full` fill all S columns)."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((n, S), np.int32)
    attn, resp = np.zeros((n, S), np.int32), np.zeros((n, S), np.int32)
    lengths = rng.integers(1, R + 1, n).astype(np.int32)
    for i in range(n):
        plen = P if i in full else rng.integers(prompt_min, P + 1)
        lengths[i] = R if i in full else lengths[i]
        tokens[i, P - plen : P + lengths[i]] = rng.integers(1, MC.vocab_size, plen + lengths[i])
        attn[i, P - plen : P + lengths[i]] = 1
        resp[i, P : P + lengths[i]] = 1
    temps = rng.choice([0.6, 1.0, 1.3], n).astype(np.float32)
    return tokens, attn, resp, lengths, temps


@pytest.fixture(scope="module")
def params():
    return numpy_params(MC, 0.3)


def check_layout(pk, attn, groups, width, micro_rows):
    """Every real token lands exactly once, whole rows per packed row, within its own group."""
    src, seg, pos = map(np.asarray, pk)
    n, s = attn.shape
    valid = seg > 0
    assert src.shape == seg.shape == pos.shape and src.shape[1] == width
    assert src.shape[0] % (groups * micro_rows) == 0
    assert sorted(src[valid].tolist()) == np.flatnonzero(attn.reshape(-1)).tolist()
    per_group = src.shape[0] // groups
    for r in range(src.shape[0]):
        ids = seg[r][valid[r]]
        assert np.all(np.diff(ids) >= 0) and (ids.size == 0 or ids[0] == 1)
        assert valid[r].sum() == 0 or valid[r][: valid[r].sum()].all()  # filled from column 0
        for sid in np.unique(ids):
            at = seg[r] == sid
            rows = np.unique(src[r][at] // s)
            assert rows.size == 1, "a segment holds one original row"
            assert rows[0] // (n // groups) == r // per_group, "rows stay in their group"
            assert (src[r][at] % s).tolist() == np.flatnonzero(attn[rows[0]]).tolist()  # whole, in order
            assert pos[r][at].tolist() == list(range(at.sum()))


def test_plan_layout_full_rows_and_partial_last_row():
    tokens, attn, *_ = make_rows(16, seed=1, full=(3,))
    pk = packing.plan(attn, groups=2, micro_rows=2, devices=2)
    check_layout(pk, attn, 2, S, 2)
    seg = np.asarray(pk.segment_ids)
    assert (seg > 0).sum(1).max() == S  # the full row fills a packed row exactly
    assert any(0 < (r > 0).sum() < S for r in seg)  # some packed row is not filled
    assert pk.src.shape[0] < 16  # fewer packed rows than padded ones
    again = packing.plan(attn, groups=2, micro_rows=2, devices=2)
    assert all(np.array_equal(a, b) for a, b in zip(pk, again))  # deterministic


def test_plan_width_sizes_and_errors():
    _, attn, *_ = make_rows(8, seed=2)
    wide = packing.plan(attn, width=4 * S, micro_rows=1)
    check_layout(wide, attn, 1, 4 * S, 1)
    assert wide.src.shape[0] <= 3
    with pytest.raises(ValueError, match="does not fit"):
        packing.plan(attn, width=4)
    holes = attn.copy()
    holes[0, P] = 0
    holes[0, P - 1] = holes[0, P + 1] = 1
    with pytest.raises(ValueError, match="contiguous"):
        packing.plan(holes)
    assert [packing.bucket(k) for k in (0, 1, 7, 8, 9, 11, 16, 17, 33)] == [1, 1, 7, 8, 10, 12, 16, 20, 40]
    assert packing.plan(attn, micro_rows=2, min_micro=5).src.shape[0] == 10


def test_plan_balances_tokens_over_devices():
    rng = np.random.default_rng(3)
    attn = np.zeros((64, 64), np.int32)
    for i, n in enumerate(rng.integers(4, 64, 64)):
        attn[i, :n] = 1
    pk = packing.plan(attn, micro_rows=8, devices=4)
    check_layout(pk, attn, 1, 64, 8)
    tokens = (np.asarray(pk.segment_ids) > 0).sum(1).reshape(-1, 4, 2)  # [micro, device, local]
    per_device = tokens.sum((0, 2))
    assert per_device.max() - per_device.min() <= 64  # within one packed row of each other


def test_segment_attention_equals_separate_rows():
    rng = np.random.default_rng(4)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 10, h, 8)), jnp.float32) for h in (4, 2, 2))
    seg = jnp.asarray([[1, 1, 1, 1, 2, 2, 2, 3, 0, 0]])
    got = attn_lib.causal_attention(q, k, v, seg > 0, "xla", segment_ids=seg)
    for a, b in ((0, 4), (4, 7), (7, 8)):
        one = attn_lib.causal_attention(q[:, a:b], k[:, a:b], v[:, a:b], jnp.ones((1, b - a)), "xla")
        np.testing.assert_allclose(np.asarray(got[:, a:b]), np.asarray(one), rtol=1e-6, atol=1e-6)


def test_flash_kernel_takes_segment_ids():
    """The Pallas TPU kernel (interpret mode) with packed segment ids = the XLA block-diagonal path."""
    from jax.experimental.pallas import tpu as pltpu

    rng = np.random.default_rng(5)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 128, h, 128)), jnp.float32) for h in (2, 1, 1))
    seg = jnp.asarray(np.repeat([1, 2, 3, 0], [50, 40, 30, 8])[None], jnp.int32)
    want = attn_lib.causal_attention(q, k, v, seg > 0, "xla", segment_ids=seg)
    with pltpu.force_tpu_interpret_mode():
        got = jax.jit(lambda *a: attn_lib.causal_attention(*a, implementation="splash", segment_ids=a[3]))(q, k, v, seg)
    real = np.asarray(seg[0] > 0)
    np.testing.assert_allclose(np.asarray(got)[0, real], np.asarray(want)[0, real], rtol=2e-5, atol=2e-5)


def _compare(got, want, attn):
    """Equal where the padded log-prob is defined: real tokens after the row's first."""
    defined = (attn > 0) & np.pad(attn[:, :-1] > 0, ((0, 0), (1, 0)))
    np.testing.assert_allclose(np.asarray(got)[defined], np.asarray(want)[defined], rtol=1e-5, atol=1e-5)
    assert not np.asarray(got)[~defined].any()


@pytest.mark.parametrize("where", ["1dev", "8dev"])
def test_packed_logprobs_equal_padded(params, where):
    tokens, attn, resp, lengths, temps = make_rows(16, seed=6, full=(2,))
    mesh = sharding.make_mesh(data=2, fsdp=4) if where == "8dev" else None
    pk = packing.plan(attn, micro_rows=8, devices=1 if mesh is None else 8)
    args = sharding.put_batch((tokens, attn, temps), mesh)
    pk_dev = sharding.put_batch(pk, mesh)

    def run(p):
        return compute_logprobs(params, MC, *args, chunk=5, micro_batch=8, packing=p)

    if mesh is None:
        want, got = run(None), run(pk_dev)
    else:
        with jax.set_mesh(mesh):
            want, got = run(None), run(pk_dev)
    _compare(got, want, attn)
