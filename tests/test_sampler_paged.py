"""The paged sampler on a tiny random Qwen3 (fp32): parity with today's sampler and transformers,
independence from S / page size / refill schedule / queue order, log-probs, page-pool invariants,
compile counts, DAPO pushes and the finished-group hook, and a sharded run.

Four prompts x G=2 (8 rows), bucket 32, 12 new tokens; the engine shapes used are the four in
ENGINES (each compiles `run` once, two of them once more for the tail) plus one sharded.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.models import forward
from microcoder_jax.sampling import paged_engine as engine, pages as pg
from microcoder_jax.sampling.paged_sampler import PagedSession, generate_paged
from microcoder_jax.sampling.static_sampler import generate, sample_tokens

PROMPTS = [
    [5, 17, 99],
    [40, 41, 42, 43, 44, 45, 46],
    [(7 * j + 3) % 125 + 3 for j in range(32)],
    [9, 8, 7, 6, 5, 4, 3, 2, 11, 12, 13, 14, 15, 16, 17, 18, 19],
]
G, MAX_NEW, PAD = 2, 12, 0
ROWS = len(PROMPTS) * G
STOPS = [2, 10, 20, 30, 50, 60, 70, 80]
CAPS = np.array([12, 5, 1, 12, 7, 12, 3, 9], np.int32)
# (slots, page_size, refill_every, tail_slots): S = N, N/2 and 3; pages of 8 and 16; refill every 1
# and 4 steps; two of them halve S in the tail (one more compile each)
ENGINES = [(ROWS, 16, 4, ROWS // 2), (ROWS // 2, 8, 1, ROWS // 2), (3, 16, 1, 3), (3, 8, 4, 1)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_checkpoint import saved_tiny_model

    return saved_tiny_model(tmp_path_factory.mktemp("tiny_qwen3_paged"), seed=0)


def _paged(tiny, engine_shape, prompts=PROMPTS, params=None, **kw):
    _, config, stored = tiny
    params = stored if params is None else params
    slots, page_size, refill_every, tail_slots = engine_shape
    kw = {"temperature": 1.0, "rng": jax.random.key(0), **kw}
    return generate_paged(
        params,
        config,
        prompts,
        num_samples=G,
        max_new_tokens=MAX_NEW,
        stop_token_ids=STOPS,
        pad_id=PAD,
        slots=slots,
        page_size=page_size,
        refill_every=refill_every,
        tail_slots=tail_slots,
        **kw,
    )


def _cut(out, caps):
    """Today's sampler output as if each row had stopped at its cap."""
    tokens, logprobs, lengths = out.tokens.copy(), out.logprobs.copy(), np.minimum(out.lengths, caps)
    beyond = np.arange(MAX_NEW)[None] >= lengths[:, None]
    tokens[beyond], logprobs[beyond] = PAD, 0.0
    stopped = np.isin(tokens[np.arange(len(caps)), lengths - 1], STOPS)
    return tokens, logprobs, lengths, ~stopped


@pytest.fixture(scope="module")
def greedy_reference(tiny):
    _, config, params = tiny
    return generate(
        params,
        config,
        PROMPTS,
        num_samples=G,
        temperature=0.0,
        max_new_tokens=MAX_NEW,
        stop_token_ids=STOPS,
        pad_id=PAD,
        rng=jax.random.key(0),
    )


@pytest.mark.slow
@pytest.mark.parametrize("engine_shape", ENGINES)
def test_greedy_matches_todays_sampler_with_mixed_caps(tiny, greedy_reference, engine_shape):
    out = _paged(tiny, engine_shape, temperature=0.0, caps=CAPS)
    tokens, logprobs, lengths, truncated = _cut(greedy_reference, CAPS)
    np.testing.assert_array_equal(out.tokens, tokens)
    np.testing.assert_array_equal(out.lengths, lengths)
    np.testing.assert_array_equal(out.truncated, truncated)
    np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-5)
    np.testing.assert_array_equal(out.prompt_tokens, greedy_reference.prompt_tokens)
    np.testing.assert_array_equal(out.prompt_mask, greedy_reference.prompt_mask)
    full = _paged(tiny, engine_shape, temperature=0.0)  # no caps: equal to today's sampler as is
    np.testing.assert_array_equal(full.tokens, greedy_reference.tokens)
    np.testing.assert_allclose(full.entropy, greedy_reference.entropy, rtol=1e-4)


def test_greedy_matches_transformers(tiny, greedy_reference):
    from tiny_checkpoint import hf_greedy

    hf = tiny[0]
    out = _paged(tiny, ENGINES[-1], temperature=0.0)
    for i, prompt in enumerate(PROMPTS):  # HF generates each prompt alone, unpadded
        ref = hf_greedy(hf, prompt, MAX_NEW, STOPS, PAD)
        for row in (i * G, i * G + 1):
            assert out.tokens[row, : out.lengths[row]].tolist() == ref


SAMPLING = dict(
    temperature=np.array([0.7, 1.3, 0.0, 1.0, 1.6, 0.9, 1.2, 1.0], np.float32),
    top_p=np.array([1, 0.9, 1, 1, 0.8, 1, 1, 0.95], np.float32),
    top_k=np.array([0, 0, 0, 5, 0, 20, 0, 3]),
    rng=jax.random.key(7),
)


@pytest.mark.slow
def test_sampled_tokens_do_not_depend_on_slots_pages_refills_or_queue_order(tiny):
    outs = [
        _paged(tiny, ENGINES[0], **SAMPLING),
        _paged(tiny, ENGINES[1], queue_order=list(range(ROWS))[::-1], **SAMPLING),
        _paged(tiny, ENGINES[3], queue_order=[3, 0, 7, 1, 6, 2, 5, 4], **SAMPLING),
    ]
    for other in outs[1:]:
        np.testing.assert_array_equal(other.tokens, outs[0].tokens)
        np.testing.assert_array_equal(other.lengths, outs[0].lengths)
        np.testing.assert_allclose(other.logprobs, outs[0].logprobs, atol=2e-5)
    assert not np.array_equal(outs[0].tokens, _paged(tiny, ENGINES[0], **{**SAMPLING, "rng": jax.random.key(8)}).tokens)


def test_logprobs_and_entropy_match_full_forward(tiny):
    _, config, params = tiny
    out = _paged(tiny, ENGINES[2], caps=CAPS, **SAMPLING)
    assert out.truncated.any() and not out.truncated.all()
    resp_mask = (np.arange(MAX_NEW)[None] < out.lengths[:, None]).astype(np.int32)
    tokens = np.concatenate([out.prompt_tokens, out.tokens], 1)
    mask = np.concatenate([out.prompt_mask, resp_mask], 1)
    logits, _ = forward(params, config, jnp.asarray(tokens), attention_mask=jnp.asarray(mask))
    temps = SAMPLING["temperature"]
    logp = jax.nn.log_softmax(np.asarray(logits)[:, 31:-1] / np.where(temps > 0, temps, 1.0)[:, None, None], -1)
    want = np.take_along_axis(np.asarray(logp), out.tokens[..., None], -1)[..., 0] * resp_mask
    np.testing.assert_allclose(out.logprobs, want, atol=2e-5)
    ent = -(np.exp(logp) * logp).sum(-1)
    np.testing.assert_allclose(out.entropy, (ent * resp_mask).sum(1) / out.lengths, rtol=1e-4)


def test_per_row_keys_draw_from_softmax():
    vocab, draws = 12, 4000
    logits = np.random.default_rng(0).normal(0, 1.5, vocab).astype(np.float32)
    keys = engine._keys(jax.random.key(0), jnp.arange(draws), jnp.zeros(draws, jnp.int32))
    token, _, _ = jax.jit(sample_tokens)(
        jnp.tile(logits, (draws, 1)), keys, jnp.ones(draws), jnp.ones(draws), jnp.zeros(draws, jnp.int32)
    )
    q = np.exp(logits - logits.max())
    q /= q.sum()
    counts = np.bincount(np.asarray(token), minlength=vocab)
    assert (np.abs(counts - draws * q) <= 5 * np.sqrt(draws * q * (1 - q)) + 1).all(), (counts, draws * q)


def _expected_refs(session):
    """References the slots and the still-queued samples should hold, counted on the host."""
    st = {k: np.asarray(jax.device_get(v)) for k, v in session.state.items() if k not in ("pool", "pages")}
    shape = session.shape
    refs = np.zeros(shape.num_pages, np.int64)
    for s in np.flatnonzero(st["slot_seq"] >= 0):
        used = st["table"][s][st["table"][s] < shape.num_pages]
        prompt = st["slot_seq"][s] // G
        full = st["prompt_len"][prompt] // shape.page_size
        np.testing.assert_array_equal(st["table"][s][:full], st["prompt_pages"][prompt][:full])  # shared full pages
        np.add.at(refs, used, 1)
    for seq in st["queue"][st["head"] : st["tail"]]:
        prompt_pages = st["prompt_pages"][seq // G]
        np.add.at(refs, prompt_pages[prompt_pages < shape.num_pages], 1)
    return refs


def test_page_pool_invariants_during_and_after_a_run(tiny):
    _, config, params = tiny
    session = PagedSession(
        params,
        config,
        num_samples=G,
        max_prompts=len(PROMPTS),
        max_new_tokens=MAX_NEW,
        prompt_width=32,
        stop_token_ids=STOPS,
        pad_id=PAD,
        rng=jax.random.key(1),
        slots=3,
        page_size=8,
        refill_every=4,
        tail_slots=1,
    )
    session.push(PROMPTS, temperature=1.0, caps=CAPS)
    pg.check_invariants(session.state["pages"], _expected_refs(session))  # only the prompts' pages, count G
    assert int(session.state["pages"].count) == session.shape.num_pages - sum(-(-len(p) // 8) for p in PROMPTS)
    widths = set()
    while not session.done:
        session.run(5)
        widths.add(session.shape.slots)
        pg.check_invariants(session.state["pages"], _expected_refs(session))
    assert min(widths) < 3  # the tail ran on fewer slots
    pg.check_invariants(session.state["pages"], np.zeros(session.shape.num_pages))  # everything came back
    done = session.output()
    session.close()  # frees the decode-layout weights, not the caller's params; outputs stay readable
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(params))
    np.testing.assert_array_equal(session.output().tokens, done.tokens)
    with pytest.raises(RuntimeError, match="closed"):
        session.push(PROMPTS[:1], temperature=1.0)


def test_allocator_refuses_to_overdraw():
    pages = pg.init_pages(4)
    pages, ids = pg.allocate(pages, jnp.array([True, False, True]))
    assert sorted(np.asarray(ids).tolist()) == [0, 1, 4] and int(pages.count) == 2
    pages, more = pg.allocate(pages, jnp.array([True, True, True]))
    assert bool(pages.failed) and (np.asarray(more) == 4).all() and int(pages.count) == 2
    pages = pg.release(pages, ids)
    assert int(pages.count) == 4 and (np.asarray(pages.refs) == 0).all()


def test_one_compile_across_temperatures_caps_and_prompt_lengths(tiny):
    _paged(tiny, ENGINES[3])
    sizes = (engine.run._cache_size(), engine.admit._cache_size())
    rng = np.random.default_rng(0)
    for i in range(4):
        prompts = [p[: 3 + i] for p in PROMPTS]
        _paged(
            tiny,
            ENGINES[3],
            prompts,
            temperature=float(0.3 + 0.4 * i),
            top_p=1.0 - 0.05 * i,
            top_k=i,
            caps=rng.integers(1, MAX_NEW + 1, ROWS),
            rng=jax.random.key(i),
        )
    assert (engine.run._cache_size(), engine.admit._cache_size()) == sizes


def test_pushed_prompts_and_group_hook_match_one_call(tiny):
    _, config, params = tiny
    whole = _paged(tiny, ENGINES[2], caps=CAPS, **SAMPLING)
    groups = {}
    one_call = _paged(
        tiny, ENGINES[2], caps=CAPS, on_group_done=lambda i, out: groups.setdefault(i, out), report_every=3, **SAMPLING
    )
    assert sorted(groups) == list(range(len(PROMPTS)))
    for i, out in groups.items():
        np.testing.assert_array_equal(out.tokens, whole.tokens[i * G : (i + 1) * G])
    np.testing.assert_array_equal(one_call.tokens, whole.tokens)
    session = PagedSession(
        params,
        config,
        num_samples=G,
        max_prompts=len(PROMPTS),
        max_new_tokens=MAX_NEW,
        prompt_width=32,
        stop_token_ids=STOPS,
        pad_id=PAD,
        rng=SAMPLING["rng"],
        slots=3,
        page_size=8,
        refill_every=4,
        tail_slots=1,
    )
    per_row = {k: SAMPLING[k] for k in ("temperature", "top_p", "top_k")}
    session.push(PROMPTS[:2], caps=CAPS[:4], **{k: v[:4] for k, v in per_row.items()})
    session.run(4)  # a DAPO refill arrives while the first prompts are still decoding
    session.push(PROMPTS[2:], caps=CAPS[4:], **{k: v[4:] for k, v in per_row.items()})
    while not session.done:
        session.run()
    np.testing.assert_array_equal(session.output().tokens, whole.tokens)
    with pytest.raises(ValueError, match="push of 1 prompts"):
        session.push(PROMPTS[:1], temperature=1.0)


def test_argument_checks(tiny):
    with pytest.raises(ValueError, match="caps"):
        _paged(tiny, ENGINES[0], caps=MAX_NEW + 1)
    with pytest.raises(ValueError, match="multiple of page_size"):
        _paged(tiny, (4, 24, 1, 4))
    with pytest.raises(ValueError, match="num_pages"):
        _paged(tiny, ENGINES[0], num_pages=5)


@pytest.mark.slow
def test_sharded_matches_single_device(tiny):
    from microcoder_jax.sharding import make_mesh

    single = _paged(tiny, ENGINES[0], **SAMPLING)
    sharded = _paged(tiny, ENGINES[0], mesh=make_mesh(data=2, fsdp=2, tensor=2), **SAMPLING)
    np.testing.assert_array_equal(sharded.tokens, single.tokens)
    np.testing.assert_array_equal(sharded.lengths, single.lengths)
    np.testing.assert_allclose(sharded.logprobs, single.logprobs, atol=1e-5)


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_decode_tensor_mesh_from_fsdp_params_matches_single_device(tiny):
    """Params FSDP-sharded on the training mesh, sampled on `sampler_mesh` (KV heads and weights split
    over tensor, slots over data): the same tokens as one device, the pool split over the heads."""
    from microcoder_jax.models import param_logical_axes, param_shapes
    from microcoder_jax.sharding import logical_to_sharding, make_mesh, sampler_mesh

    _, config, params = tiny
    train = make_mesh(data=1, fsdp=8, tensor=1)
    mesh = sampler_mesh(train, -1, config.num_kv_heads)
    assert dict(mesh.shape) == {"data": 4, "fsdp": 1, "tensor": 2}
    assert list(mesh.devices.flat) == list(train.devices.flat)
    placed = jax.device_put(params, logical_to_sharding(param_logical_axes(config), train, param_shapes(config)))
    single = _paged(tiny, ENGINES[0], **SAMPLING)
    rng, sampling = SAMPLING["rng"], {k: v for k, v in SAMPLING.items() if k != "rng"}
    session = PagedSession(
        placed,
        config,
        num_samples=G,
        max_prompts=len(PROMPTS),
        max_new_tokens=MAX_NEW,
        prompt_width=32,
        stop_token_ids=STOPS,
        pad_id=PAD,
        rng=rng,
        slots=ROWS,
        page_size=16,
        mesh=mesh,
    )
    assert all(x.sharding.mesh.shape == mesh.shape for x in jax.tree.leaves(session.params))
    session.push(PROMPTS, **sampling)
    while not session.done:
        session.run(None)
    pool = session.state["pool"].k[0]
    assert pool.sharding.shard_shape(pool.shape)[0] == config.num_kv_heads // 2  # heads split, not replicated
    session.close()
    sharded = session.output()
    np.testing.assert_array_equal(sharded.tokens, single.tokens)
    np.testing.assert_array_equal(sharded.lengths, single.lengths)
    np.testing.assert_allclose(sharded.logprobs, single.logprobs, atol=1e-5)
