"""Training attention on GPU: the cuDNN path (``attention.fused_attention``), padded and packed.

On CPU: the mask cuDNN gets, through ``jax.nn.dot_product_attention``'s XLA implementation, equals
our XLA path; and the whole forward + backward lowers for CUDA ahead of time (no GPU needed: the
cuDNN checks of shapes and dtypes run while lowering). Where JAX sees a GPU (the ``accelerator``
tests, which ``benchmarks/device_check.py`` runs), cuDNN's values and gradients equal XLA's.
"""

from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.models import attention as attn

B, T, H, K, D = 2, 16, 4, 2, 32
ON_GPU = jax.default_backend() == "gpu"


def _inputs(dtype=jnp.bfloat16, seed=0):
    """q/k/v, a left-padded row and a full one, and packed segment ids (two segments + padding)."""
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(kq, (B, T, H, D), dtype)
    k, v = (jax.random.normal(x, (B, T, K, D), dtype) for x in (kk, kv))
    token_mask = jnp.asarray([[0] * 5 + [1] * (T - 5), [1] * T], jnp.int32)
    segments = jnp.asarray([[1] * 6 + [2] * 7 + [0] * 3, [1] * 3 + [2] * 10 + [3] * 3], jnp.int32)
    return q, k, v, token_mask, segments


def _xla(q, k, v, token_mask, segment_ids=None):
    return attn.causal_attention(q, k, v, token_mask, "xla", segment_ids=segment_ids)


def _cudnn_api_with_xla(q, k, v, token_mask, segment_ids=None):
    """fused_attention's arguments through the same API call with implementation='xla'."""
    out = attn.fused_attention(q, k, v, token_mask, implementation="xla", segment_ids=segment_ids)
    return jnp.where(token_mask[:, :, None, None].astype(bool), out, 0)


@pytest.mark.parametrize("packed", [False, True])
def test_the_cudnn_mask_equals_the_xla_path(packed):
    q, k, v, token_mask, segments = _inputs(jnp.float32)
    seg = segments if packed else None
    mask = segments > 0 if packed else token_mask
    assert attn.cudnn_mask(mask, seg).shape == (B, 1, T, T)  # both sequence dims: cuDNN's bias rule
    real = np.asarray(mask, bool)  # padding queries are garbage on the XLA path, zeros on the kernel paths
    got, want = _cudnn_api_with_xla(q, k, v, mask, seg), _xla(q, k, v, mask, seg)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-5)


def test_a_key_mask_alone_is_what_cudnn_rejects():
    """The [B, 1, 1, T] key mask the cuDNN path used to pass fails cuDNN's layout check (why cudnn_mask exists)."""
    from jax._src.cudnn import fused_attention_stablehlo as fa

    q, k, v, token_mask, _ = _inputs()
    bias = fa.combine_bias_and_mask(None, token_mask[:, None, None, :].astype(bool), q.dtype)
    with pytest.raises(ValueError, match="Bias must have same seq length"):
        fa.check_layout(q, k, v, bias, None, None, None, None, None, None, fa.AttentionLayout.BTNH)
    bias = fa.combine_bias_and_mask(None, attn.cudnn_mask(token_mask), q.dtype)
    fa.check_layout(q, k, v, bias, None, None, None, None, None, None, fa.AttentionLayout.BTNH)


@pytest.mark.parametrize("packed", [False, True])
def test_the_cudnn_train_step_lowers_for_cuda(monkeypatch, packed):
    """attention=auto on a (forced) GPU picks cuDNN; forward + backward lower for CUDA with the cuDNN
    custom calls in the program (cuDNN's version probe is stubbed: no CUDA libraries here)."""
    from jax._src.cudnn import fused_attention_stablehlo as fa

    q, k, v, token_mask, segments = _inputs()
    seg = segments if packed else None
    mask = segments > 0 if packed else token_mask
    monkeypatch.setattr(attn, "platform", lambda: "gpu")
    assert attn.choose("auto", cached=False, seq_len=T, head_dim=D, dtype=jnp.bfloat16) == "cudnn"
    assert attn.choose("auto", cached=False, seq_len=T + 1, head_dim=D, dtype=jnp.bfloat16) == "xla"
    with pytest.raises(ValueError, match="even sequence lengths"):
        attn.choose("cudnn", cached=False, seq_len=T + 1, head_dim=D)

    def loss(q, k, v):
        return attn.causal_attention(q, k, v, mask, "auto", segment_ids=seg).astype(jnp.float32).sum()

    with mock.patch.object(fa, "check_cudnn_version", return_value=91000):
        text = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(q, k, v).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__cudnn$fmha") >= 2, "the forward and backward cuDNN attention calls"


@pytest.mark.accelerator
@pytest.mark.skipif(not ON_GPU, reason=f"needs a GPU; JAX's backend here is {jax.default_backend()}")
@pytest.mark.parametrize("packed", [False, True])
def test_cudnn_equals_xla_on_a_gpu(packed):
    """Values and gradients of the real queries: cuDNN = XLA (bf16 tolerance)."""
    q, k, v, token_mask, segments = _inputs()
    seg = segments if packed else None
    mask = segments > 0 if packed else token_mask
    real = mask.astype(bool)[:, :, None, None]

    def loss(impl):
        return lambda q, k, v: (
            jnp.where(real, attn.causal_attention(q, k, v, mask, impl, segment_ids=seg), 0).astype(jnp.float32).sum()
        )

    def run(impl):
        out = jax.jit(lambda *a: attn.causal_attention(*a, mask, impl, segment_ids=seg))(q, k, v)
        return out, jax.jit(jax.grad(loss(impl), argnums=(0, 1, 2)))(q, k, v)

    (out_c, grads_c), (out_x, grads_x) = run("cudnn"), run("xla")
    np.testing.assert_allclose(
        np.asarray(jnp.where(real, out_c, 0), np.float32),
        np.asarray(jnp.where(real, out_x, 0), np.float32),
        atol=2e-2,
        rtol=2e-2,
    )
    for a, b in zip(grads_c, grads_x):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=5e-2, rtol=5e-2)
