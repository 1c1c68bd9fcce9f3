"""The paged session's ring and weight swaps (partial rollouts' engine side), on a tiny random Qwen3.

A session that retires finished prompts reuses their positions and samples exactly what one long
session would (the same per-row keys); `set_params` between calls lets running rows continue with
the new weights on their kept KV, token for token what a plain greedy loop does with that cache,
and every token records the version that drew it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.models import forward, init_cache
from microcoder_jax.sampling.paged_sampler import PagedSession, generate_paged

pytestmark = pytest.mark.slow  # four engine shapes compiled (~50 s on 2 cores): the full suite only

PROMPTS = [[5, 17, 99], [40, 41, 42, 43, 44, 45, 46], [9, 8, 7, 6, 5, 4, 3, 2, 11], [60, 61, 3]]
G, MAX_NEW, PAD, WIDTH = 2, 10, 0, 16
NO_STOP = [10**6]  # never sampled: every row runs to its cap


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_checkpoint import saved_tiny_model

    _, config, params = saved_tiny_model(tmp_path_factory.mktemp("tiny_qwen3_partial"), seed=0)
    return config, params


def _session(tiny, params=None, *, max_prompts=2, slots=4, temperature=1.0):
    config, stored = tiny
    return PagedSession(
        stored if params is None else params,
        config,
        num_samples=G,
        max_prompts=max_prompts,
        max_new_tokens=MAX_NEW,
        prompt_width=WIDTH,
        stop_token_ids=NO_STOP,
        pad_id=PAD,
        rng=jax.random.key(3),
        slots=slots,
        page_size=8,
        refill_every=1,
    )


def _drain(session):
    finished = []
    while not session.done:
        finished += session.run(3)
    return finished


def test_ring_reuses_positions_and_samples_as_one_long_session(tiny):
    config, params = tiny
    whole = generate_paged(
        params,
        config,
        PROMPTS,
        num_samples=G,
        temperature=1.0,
        max_new_tokens=MAX_NEW,
        stop_token_ids=NO_STOP,
        pad_id=PAD,
        rng=jax.random.key(3),
        slots=4,
        page_size=8,
        refill_every=1,
        prompt_buckets=(WIDTH,),
    )
    session = _session(tiny)  # room for 2 prompts: the second push reuses both positions
    got = []
    for lo in (0, 2):
        first = session.push(PROMPTS[lo : lo + 2], temperature=1.0).start
        assert sorted(_drain(session)) == [first, first + 1]
        got.append(session.output([first, first + 1]))
        session.retire([first, first + 1])
    tokens = np.concatenate([o.tokens for o in got])
    np.testing.assert_array_equal(tokens, whole.tokens)  # row r of the session draws with key r
    np.testing.assert_allclose(np.concatenate([o.logprobs for o in got]), whole.logprobs, atol=1e-5)
    np.testing.assert_array_equal(np.concatenate([o.prompt_tokens for o in got]), whole.prompt_tokens)
    session.close()


def test_ring_refuses_what_would_lose_data(tiny):
    session = _session(tiny)
    first = session.push(PROMPTS[:2], temperature=0.0).start
    with pytest.raises(ValueError, match="need 1..0"):
        session.push(PROMPTS[2:3], temperature=0.0)  # both positions hold rows not yet retired
    with pytest.raises(ValueError, match="has not finished"):
        session.retire([first])
    _drain(session)
    session.retire([first])
    assert session.room() == 1 and session.active() == [first + 1]
    with pytest.raises(ValueError, match="already retired"):
        session.output([first])
    session.push(PROMPTS[2:3], temperature=0.0)  # takes the retired position
    _drain(session)
    session.close()


def _greedy_with_swap(config, old, new, prompt, versions):
    """A plain greedy loop on a dense cache: token t from the forward with `versions[t]`'s params."""
    n = len(prompt)
    cache = init_cache(config, 1, n + MAX_NEW)
    valid = jnp.arange(n + MAX_NEW)[None, :] < n
    logits, cache = forward(
        old if versions[0] == 0 else new,
        config,
        jnp.asarray([prompt]),
        attention_mask=valid,
        positions=jnp.arange(n)[None, :],
        cache=cache,
        cache_index=0,
    )
    tokens = [int(jnp.argmax(logits[0, -1]))]
    for t in range(1, MAX_NEW):
        index = n + t - 1
        valid = jnp.arange(n + MAX_NEW)[None, :] <= index
        logits, cache = forward(
            old if versions[t] == 0 else new,
            config,
            jnp.asarray([[tokens[-1]]]),
            attention_mask=valid,
            positions=jnp.asarray([[index]]),
            cache=cache,
            cache_index=index,
        )
        tokens.append(int(jnp.argmax(logits[0, -1])))
    return tokens


def test_weight_swap_continues_rows_on_their_kept_kv(tiny):
    config, old = tiny
    new = {**old, "embed": jnp.roll(old["embed"], 1, axis=0)}  # token i now reads token i - 1's embedding
    session = _session(tiny, old, slots=4)
    first = session.push(PROMPTS[:2], temperature=0.0).start
    session.run(4)  # a few tokens with version 0
    session.set_params(new, 1)
    _drain(session)
    out = session.output([first, first + 1])
    assert out.versions is not None
    for row in range(2 * G):
        v = out.versions[row]
        assert (np.diff(v) >= 0).all() and v[0] == 0 and v[-1] == 1, v  # old, then new: a swap mid-row
        want = _greedy_with_swap(config, old, new, PROMPTS[row // G], v)
        assert out.tokens[row].tolist() == want
    plain_old = _greedy_with_swap(config, old, old, PROMPTS[0], np.zeros(MAX_NEW, int))
    assert out.tokens[0].tolist() != plain_old  # the swap changed what followed
    session.close()


def test_weight_swap_with_recompute_continues_as_a_fresh_prefill(tiny):
    """train.partial_recompute: after the swap every running row continues as the new weights decode
    its prompt + tokens so far from scratch, and a queued row samples wholly with the new weights."""
    config, old = tiny
    new = {**old, "embed": jnp.roll(old["embed"], 1, axis=0)}
    session = _session(tiny, old, slots=2)  # 4 rows on 2 slots: two rows still queued at the swap
    first = session.push(PROMPTS[:2], temperature=0.0).start
    session.run(4)
    session.set_params(new, 1, recompute=True, chunk=1)  # chunk 1: the loops run more than once
    _drain(session)
    out = session.output([first, first + 1])
    assert out.versions is not None
    for row in range(2 * G):
        prompt, v = PROMPTS[row // G], out.versions[row]
        prefix = out.tokens[row][v == 0].tolist()
        assert (row < 2) == bool(prefix), v  # rows 0-1 had slots before the swap, rows 2-3 were queued
        fresh = _greedy_with_swap(config, new, new, prompt + prefix, np.ones(MAX_NEW, int))
        assert out.tokens[row].tolist() == prefix + fresh[: MAX_NEW - len(prefix)]
    stats = session.stats()
    # rows 0-1 re-prefill prompt + 4 fed tokens each (5 drawn, the last not fed); both prompts once
    assert stats["recomputed"] == 2 * (len(PROMPTS[0]) + 4) + len(PROMPTS[0]) + len(PROMPTS[1])
    session.close()


def test_write_tokens_equals_one_token_writes_in_an_int8_pool():
    from microcoder_jax.models import paged_attention as pa

    rng = np.random.default_rng(0)
    pool = pa.QuantizedPages(jnp.zeros((2, 4, 8, 16), jnp.int8), jnp.zeros((2, 4, 8), jnp.float32))
    page, offset = np.array([1, 1, 3, 1, 4]), np.array([0, 5, 2, 7, 0])  # page 4: out of range, dropped
    new = jnp.asarray(rng.normal(size=(5, 2, 16)), jnp.float32)
    many = pa.write_tokens(pool, jnp.asarray(page), jnp.asarray(offset), new)
    one = pool
    for i in range(5):
        one = pa.write_keys(one, jnp.asarray(page[i : i + 1]), jnp.asarray(offset[i : i + 1]), new[i : i + 1])
    np.testing.assert_array_equal(many.data, one.data)
    np.testing.assert_array_equal(many.scale, one.scale)
    assert int(jnp.count_nonzero(many.scale)) == 2 * 4  # 4 tokens written, 2 heads each
