"""Multi-turn KV reuse in the paged engine (`PagedSession(hold=True)`, `extend`, `drop`): a row
continued with an environment's turn appended samples what a fresh prefill of the whole
conversation samples (greedy, tiny fp32 model), only the new tokens are prefilled, pages are
accounted for through extends and drops, and bad continuations are refused before anything runs."""

import jax
import numpy as np
import pytest

from microcoder_jax.sampling import pages as pg
from microcoder_jax.sampling.paged_sampler import PagedSession, generate_paged

PROMPTS = [[5, 17, 99], [40, 41, 42, 43, 44, 45, 46], [(7 * j + 3) % 125 + 3 for j in range(29)]]
G, MAX_NEW, PAD, PAGE = 2, 10, 0, 8
STOPS = [2, 10, 20]
WIDTH = 80  # the turn-2 prompt width: the widest prompt (32) + an answer (10) + feedback (<= 16), paged


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_checkpoint import saved_tiny_model

    return saved_tiny_model(tmp_path_factory.mktemp("tiny_paged_extend"), seed=0)


def _session(tiny, **kw):
    _, config, params = tiny
    rows = len(PROMPTS) * G
    # 3 slots and no tail shrink: one `run` program for the file
    kw = {"slots": 3, "tail_slots": 3, "max_prompts": len(PROMPTS) + rows, "num_pages": 200, "hold": True, **kw}
    return PagedSession(
        params,
        config,
        num_samples=G,
        max_new_tokens=MAX_NEW,
        prompt_width=WIDTH,
        stop_token_ids=STOPS,
        pad_id=PAD,
        rng=jax.random.key(0),
        page_size=PAGE,
        refill_every=2,
        **kw,
    )


def _feedback(i: int) -> list[int]:
    """An environment's turn of 3..16 tokens (no stop token in it)."""
    return [(11 * i + 5 * j) % 90 + 30 for j in range(3 + (5 * i) % 14)]


def _held_refs(session) -> np.ndarray:
    """References the held rows' page tables and the queued or running prompts account for."""
    refs = np.zeros(session.shape.num_pages, np.int64)
    for row in np.asarray(session.state["row_table"]):
        for page in row[row < session.shape.num_pages]:
            refs[page] += 1
    return refs


@pytest.mark.slow
def test_extend_samples_what_a_fresh_prefill_of_the_conversation_samples(tiny):
    _, config, params = tiny
    session = _session(tiny)
    first = session.push(PROMPTS, temperature=0.0, width=32)
    while not session.done:
        session.run(4)
    turn1 = session.output(list(first))
    # every row is held: its pages are referenced by its table alone, and nothing else is
    pg.check_invariants(session.state["pages"], _held_refs(session))
    rows = [(p, j) for p in first for j in range(G)]
    contexts = [
        PROMPTS[p] + turn1.tokens[k, : turn1.lengths[k]].tolist() + _feedback(k) for k, (p, _) in enumerate(rows)
    ]
    keep = [k for k in range(len(rows)) if k != 3]  # row 3's episode ends: its pages come back
    session.drop([rows[3]])
    second = session.extend([rows[k] for k in keep], [contexts[k] for k in keep], temperature=0.0)
    while not session.done:
        session.run(4)
    turn2 = session.output(list(second))
    assert turn2.tokens.shape[0] == len(keep)  # one sample per continued row
    reference = generate_paged(
        params,
        config,
        [contexts[k] for k in keep],
        num_samples=1,
        max_new_tokens=MAX_NEW,
        stop_token_ids=STOPS,
        pad_id=PAD,
        rng=jax.random.key(9),
        temperature=0.0,
        prompt_buckets=(WIDTH,),
        page_size=PAGE,
    )
    np.testing.assert_array_equal(turn2.lengths, reference.lengths)
    np.testing.assert_array_equal(turn2.tokens, reference.tokens)
    np.testing.assert_allclose(turn2.logprobs, reference.logprobs, atol=2e-4)
    np.testing.assert_array_equal(turn2.prompt_tokens[:, -len(contexts[0]) :][0], contexts[0])
    # the continued rows are held now; dropping them gives every page back
    session.drop([(p, 0) for p in second])
    pg.check_invariants(session.state["pages"], np.zeros(session.shape.num_pages))
    session.close()


@pytest.mark.slow  # another slot width's programs (~15 s)
def test_a_continued_row_goes_before_queued_rows_and_draws_with_its_own_id(tiny):
    """extend queues its rows ahead of the rows still queued (an episode in flight finishes before
    a new one starts), and with `row_ids` a continued row samples the same tokens at T = 1
    whether other rows wait behind it or not."""

    def continued(others: bool):
        session = _session(tiny, slots=1, tail_slots=1)
        (a,) = session.push(PROMPTS[:1], temperature=1.0, width=32)
        while not session.done:
            session.run(4)
        answer = session.output([a])
        if others:  # two more prompts' rows wait in the queue, none started
            session.push(PROMPTS[1:], temperature=1.0, width=32)
        context = PROMPTS[0] + answer.tokens[0, : answer.lengths[0]].tolist() + _feedback(0)
        (b,) = session.extend([(a, 0)], [context], temperature=1.0, row_ids=[1000])
        order = []
        while not session.done:
            session.run(1)
            order += session.finished_rows
        out = session.output_rows([(b, 0)])
        session.close()
        return order, out

    order, queued = continued(True)
    assert order[0] == (2 + 1, 0) and len(order) == 1 + 2 * G  # the continued row (prompt 3) first
    _, alone = continued(False)
    np.testing.assert_array_equal(queued.tokens, alone.tokens)
    np.testing.assert_allclose(queued.logprobs, alone.logprobs, atol=1e-6)


@pytest.mark.slow  # compiles the engine's programs on a mesh (~20 s): the quick tier keeps one device
def test_extend_on_a_sampler_mesh_matches_one_device(tiny):
    """Keys split over the KV heads (tensor) and slots over data: the same two turns as one device."""
    from microcoder_jax.sharding import make_mesh

    def two_turns(mesh):
        session = _session(tiny, mesh=mesh)
        first = session.push(PROMPTS, temperature=0.7, width=32)
        while not session.done:
            session.run(4)
        out = session.output(list(first))
        rows = [(p, j) for p in first for j in range(G)]
        contexts = [
            PROMPTS[p] + out.tokens[k, : out.lengths[k]].tolist() + _feedback(k) for k, (p, _) in enumerate(rows)
        ]
        second = session.extend(rows, contexts, temperature=0.7)
        while not session.done:
            session.run(4)
        got = session.output(list(second))
        session.close()
        return got

    single, sharded = two_turns(None), two_turns(make_mesh(data=2, fsdp=2, tensor=2))
    np.testing.assert_array_equal(sharded.tokens, single.tokens)
    np.testing.assert_allclose(sharded.logprobs, single.logprobs, atol=1e-5)


def test_extend_refuses_a_context_that_does_not_continue_the_row(tiny):
    session = _session(tiny, max_prompts=len(PROMPTS) + 2)
    (p,) = session.push(PROMPTS[:1], temperature=0.0, width=32)
    while not session.done:
        session.run()
    answer = session.output([p]).tokens[0, : session.output([p]).lengths[0]].tolist()
    with pytest.raises(ValueError, match="does not continue the row"):
        session.extend([(p, 0)], [[7] + answer + [33]], temperature=0.0)  # not the row's prompt
    with pytest.raises(ValueError, match="does not continue the row"):
        session.extend([(p, 0)], [PROMPTS[0] + answer[:-1]], temperature=0.0)  # less than its keys
    with pytest.raises(ValueError, match="more than the prompt width"):
        session.extend([(p, 0)], [PROMPTS[0] + answer + [33] * WIDTH], temperature=0.0)
    with pytest.raises(ValueError, match="chunk=1: need at least the 2 new tokens"):
        session.extend([(p, 0)], [PROMPTS[0] + answer + [33]], temperature=0.0, chunk=1)
    with pytest.raises(ValueError, match="retiring"):
        session.retire([p])
    session.extend([(p, 0)], [PROMPTS[0] + answer + [33]], temperature=0.0)
    with pytest.raises(ValueError, match="is not held"):  # extended already
        session.extend([(p, 0)], [PROMPTS[0] + answer + [33]], temperature=0.0)
    with pytest.raises(ValueError, match="not held"):
        session.drop([(p, 0)])
    session.close()


def test_extend_needs_a_holding_session(tiny):
    session = _session(tiny, hold=False)
    (p,) = session.push(PROMPTS[:1], temperature=0.0, width=32)
    while not session.done:
        session.run()
    with pytest.raises(ValueError, match="hold=True"):
        session.extend([(p, 0)], [PROMPTS[0] + [33]], temperature=0.0)
    pg.check_invariants(session.state["pages"], np.zeros(session.shape.num_pages))  # nothing held
    session.close()
