"""Sampler correctness on a tiny random Qwen3 (fp32): parity with transformers, statistics, shapes.

Every generate() call here uses the same shapes (3 prompts x G=2, bucket 32, 12 new tokens in two
decode phases, 8 stop ids), so the module compiles prefill and decode once, plus once more for the
sharded test.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.models import forward
from microcoder_jax.sampling import static_sampler as sampler
from microcoder_jax.sampling.static_sampler import (
    default_stop_token_ids,
    generate,
    phase_ends,
    prompt_bucket,
    sample_tokens,
)

# Left-padded to the 32-token bucket: prompts 0 and 1 are padded, prompt 2 fills it exactly.
PROMPTS = [[5, 17, 99], [40, 41, 42, 43, 44, 45, 46], [(7 * j + 3) % 125 + 3 for j in range(32)]]
G, MAX_NEW, PAD = 2, 12, 0
STOPS = [2, 10, 20, 30, 50, 60, 70, 80]  # EOS (2) plus seven more so that some rows stop early


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_checkpoint import saved_tiny_model

    path = tmp_path_factory.mktemp("tiny_qwen3")
    return (*saved_tiny_model(path, seed=0), path)


def _generate(tiny, prompts=PROMPTS, **kw):
    _, config, params, _ = tiny
    kw = {"temperature": 1.0, "rng": jax.random.key(0), **kw}
    return generate(
        params, config, prompts, num_samples=G, max_new_tokens=MAX_NEW, stop_token_ids=STOPS, pad_id=PAD, **kw
    )


def _check_layout(out):
    """Stop/pad bookkeeping every output must satisfy."""
    n = len(PROMPTS) * G
    assert out.tokens.shape == out.logprobs.shape == (n, MAX_NEW)
    assert out.prompt_tokens.shape == out.prompt_mask.shape == (n, 32)
    for row in range(n):
        length, toks = out.lengths[row], out.tokens[row]
        body_stops = np.isin(toks[: length - 1], STOPS)
        assert not body_stops.any(), "a stop token before the end"
        assert out.truncated[row] == (not np.isin(toks[length - 1], STOPS))
        assert out.truncated[row] <= (length == MAX_NEW)
        assert (toks[length:] == PAD).all() and (out.logprobs[row, length:] == 0).all()
        assert (out.logprobs[row, :length] <= 0).all()


def test_greedy_matches_transformers(tiny):
    from tiny_checkpoint import hf_greedy

    hf = tiny[0]
    out = _generate(tiny, temperature=0.0)
    _check_layout(out)
    for i, prompt in enumerate(PROMPTS):  # HF generates each prompt alone, unpadded
        ref = hf_greedy(hf, prompt, MAX_NEW, STOPS, PAD)
        for row in (i * G, i * G + 1):
            assert out.tokens[row, : out.lengths[row]].tolist() == ref
    np.testing.assert_array_equal(out.prompt_mask.sum(1), np.repeat([len(p) for p in PROMPTS], G))


def test_logprobs_and_entropy_match_full_forward(tiny):
    _, config, params, _ = tiny
    temps = np.array([0.7, 1.3, 0.0, 1.0, 1.6, 0.9], np.float32)
    out = _generate(
        tiny,
        temperature=temps,
        top_p=np.array([1, 0.9, 1, 1, 0.8, 1], np.float32),
        top_k=np.array([0, 0, 0, 5, 0, 20]),
        rng=jax.random.key(7),
    )
    _check_layout(out)
    assert out.truncated.any() and not out.truncated.all()  # both endings are exercised
    resp_mask = (np.arange(MAX_NEW)[None] < out.lengths[:, None]).astype(np.int32)
    tokens = np.concatenate([out.prompt_tokens, out.tokens], 1)
    mask = np.concatenate([out.prompt_mask, resp_mask], 1)
    logits, _ = forward(params, config, jnp.asarray(tokens), attention_mask=jnp.asarray(mask))
    t = np.where(temps > 0, temps, 1.0)[:, None, None]
    logp = jax.nn.log_softmax(np.asarray(logits)[:, 31:-1] / t, axis=-1)  # position P-1+j predicts token j
    want = np.take_along_axis(np.asarray(logp), out.tokens[..., None], -1)[..., 0] * resp_mask
    np.testing.assert_allclose(out.logprobs, want, atol=2e-5)
    ent = -(np.exp(logp) * logp).sum(-1)
    np.testing.assert_allclose(out.entropy, (ent * resp_mask).sum(1) / out.lengths, rtol=1e-4)


def test_temperature_changes_do_not_recompile_and_key_reproduces(tiny):
    _generate(tiny)  # make sure this shape is compiled
    sizes = (sampler.prefill._cache_size(), sampler.decode._cache_size())
    outs = []
    for i, temperature in enumerate(np.linspace(0.3, 2.0, 10)):
        prompts = [p[: 3 + i % 4] for p in PROMPTS]  # new prompt lengths, same bucket
        outs.append(
            _generate(
                tiny, prompts, temperature=float(temperature), top_p=1.0 - 0.05 * i, top_k=i, rng=jax.random.key(i)
            )
        )
    assert (sampler.prefill._cache_size(), sampler.decode._cache_size()) == sizes
    again = _generate(tiny, [p[:3] for p in PROMPTS], temperature=0.3, top_p=1.0, top_k=0, rng=jax.random.key(0))
    np.testing.assert_array_equal(again.tokens, outs[0].tokens)
    np.testing.assert_array_equal(again.logprobs, outs[0].logprobs)
    assert not np.array_equal(
        outs[0].tokens, _generate(tiny, [p[:3] for p in PROMPTS], temperature=0.3, rng=jax.random.key(1)).tokens
    )


def test_sharded_matches_single_device(tiny):
    from microcoder_jax.sharding import make_mesh

    kw = dict(temperature=np.linspace(0.0, 1.5, len(PROMPTS) * G), top_p=0.95, rng=jax.random.key(3))
    single = _generate(tiny, **kw)
    sharded = _generate(tiny, mesh=make_mesh(data=2, fsdp=2, tensor=2), **kw)  # 3 prompts padded to 4
    np.testing.assert_array_equal(sharded.tokens, single.tokens)
    np.testing.assert_array_equal(sharded.lengths, single.lengths)
    np.testing.assert_allclose(sharded.logprobs, single.logprobs, atol=1e-5)


def _allowed_probs(logits, temperature, top_p, top_k):
    """Reference next-token distribution after top-k then top-p, written independently in numpy."""
    scaled = logits / temperature
    order = np.argsort(-scaled)
    k = top_k if top_k > 0 else len(logits)
    probs = np.exp(scaled[order[:k]] - scaled[order[:k]].max())
    probs /= probs.sum()
    keep = order[:k][(np.cumsum(probs) - probs) < top_p] if top_p < 1 else order[:k]
    q = np.zeros(len(logits))
    q[keep] = np.exp(scaled[keep] - scaled[keep].max())
    return q / q.sum()


def test_sampling_frequencies_follow_softmax_over_allowed_tokens():
    vocab, draws = 12, 4000
    logits = np.random.default_rng(0).normal(0, 1.5, vocab).astype(np.float32)
    settings = [(0.7, 1.0, 0), (1.0, 1.0, 4), (1.3, 0.8, 0), (1.0, 0.9, 6), (0.0, 1.0, 0)]
    temperature, top_p, top_k = (np.repeat(np.array(col), draws) for col in zip(*settings))
    token, logprob, entropy = jax.jit(sample_tokens)(
        jnp.asarray(np.tile(logits, (len(temperature), 1))),
        jax.random.key(0),
        jnp.asarray(temperature, jnp.float32),
        jnp.asarray(top_p, jnp.float32),
        jnp.asarray(top_k, jnp.int32),
    )
    token = np.asarray(token).reshape(len(settings), draws)
    for (t, p, k), drawn in zip(settings, token):
        if t == 0:
            assert (drawn == np.argmax(logits)).all()
            continue
        q = _allowed_probs(logits, t, p, k)
        counts = np.bincount(drawn, minlength=vocab)
        assert (counts[q == 0] == 0).all(), f"T={t} p={p} k={k}: a token outside the allowed set"
        bound = 5 * np.sqrt(draws * q * (1 - q)) + 1  # per-token binomial bound, 5 sigma
        assert (np.abs(counts - draws * q) <= bound).all(), (t, p, k, counts, draws * q)
        assert (counts[q > 0.01] > 0).all()
    t = np.where(temperature > 0, temperature, 1.0)[:, None]
    full = np.asarray(jax.nn.log_softmax(logits[None] / t, axis=-1))
    np.testing.assert_allclose(np.asarray(logprob), full[np.arange(len(t)), token.reshape(-1)], atol=1e-5)
    np.testing.assert_allclose(np.asarray(entropy), -(np.exp(full) * full).sum(-1), rtol=1e-5)


def test_buckets_and_argument_checks(tiny):
    assert [prompt_bucket(n) for n in (1, 32, 33, 1000, 1025, 3000)] == [32, 32, 64, 1024, 2048, 3072]
    assert prompt_bucket(130, [128, 256, 512]) == 256
    with pytest.raises(ValueError):
        prompt_bucket(600, [128, 256, 512])
    with pytest.raises(ValueError, match="one value per row"):
        _generate(tiny, temperature=[1.0, 1.0])
    with pytest.raises(ValueError, match="top_p"):
        _generate(tiny, top_p=0.0)
    with pytest.raises(ValueError, match="decode_phases"):
        _generate(tiny, decode_phases=0)


def test_decode_phases_grow_the_cache_to_max_new():
    """Every test here decodes MAX_NEW = 12 in two phases (caches of 8 then 12 slots)."""
    assert phase_ends(MAX_NEW, 4) == (8, 12)
    assert phase_ends(256, 4) == (64, 128, 192, 256) and phase_ends(256, 1) == (256,)
    assert phase_ends(100, 3) == (40, 72, 100) and phase_ends(5, 8) == (5,)


def test_default_stop_token_ids(tiny):
    class FakeTokenizer:
        eos_token_id = 7

        def get_vocab(self):
            return {"<|im_end|>": 9, "hello": 3}

    assert default_stop_token_ids(tiny[3]) == [2]
    assert default_stop_token_ids(tiny[3], FakeTokenizer()) == [2, 7, 9]


def test_decode_layout_replicates_the_fsdp_dim_and_splits_heads_over_tensor():
    """DECODE_AXIS_RULES: weights whole on every data/FSDP device; the training rules keep them FSDP-sharded."""
    from jax.sharding import PartitionSpec as P

    from microcoder_jax import sharding as shd
    from microcoder_jax.models import get_preset

    config, mesh = get_preset("tiny"), shd.make_mesh(data=2, fsdp=2, tensor=2)
    layer = sampler.decode_shardings(config, mesh).layers[1]
    assert layer["q_proj"].spec == P("tensor", None)  # (heads x head_dim, hidden): whole heads over tensor
    assert layer["o_proj"].spec == P(None, "tensor") and layer["down_proj"].spec == P(None, "tensor")
    assert layer["attn_norm"].spec == P(None)
    assert sampler.decode_shardings(config, mesh).embed.spec == P("tensor", None)
    trained = sampler.decode_shardings(config, mesh, rules=shd.LOGICAL_AXIS_RULES).layers[1]
    assert trained["q_proj"].spec == P("tensor", "fsdp") and trained["attn_norm"].spec == P("fsdp")
    odd = sampler.decode_shardings(config.replace(num_heads=6, num_kv_heads=3), shd.make_mesh(fsdp=2, tensor=4))
    assert odd.layers[0]["q_proj"].spec == P(None, None)  # 6 heads do not split 4 ways: kept whole


def test_free_deletes_the_decode_copy_but_not_the_callers_arrays():
    from microcoder_jax.models import get_preset, init_params
    from microcoder_jax.models.decoding import decoding_params, free

    config = get_preset("tiny", dtype="float32")
    params = init_params(config, jax.random.key(0))
    prepared = jax.jit(lambda p: decoding_params(p, config))(params)
    free(prepared, params)
    assert all(x.is_deleted() for x in jax.tree.leaves(prepared) if not any(x is y for y in jax.tree.leaves(params)))
    assert not any(x.is_deleted() for x in jax.tree.leaves(params))
    assert prepared.embed.is_deleted() and prepared.layers[0]["q_proj"].is_deleted()
