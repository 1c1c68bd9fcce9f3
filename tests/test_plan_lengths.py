"""The planner's length profiles: the decode simulator against the paged engine's real schedule
(a tiny random model on CPU, rows stopping at their caps), and the profiles' parsing."""
import jax
import numpy as np
import pytest

from microcoder_jax.models import get_preset, init_params
from microcoder_jax.plan import decode_sim
from microcoder_jax.sampling.paged_sampler import generate_paged

G, MAX_NEW, WIDTH = 2, 24, 32
PROMPTS = [[5, 17, 99], [40, 41, 42, 43, 44, 45, 46], [(7 * j + 3) % 120 + 3 for j in range(32)],
           [9, 8, 7, 6, 5, 4, 3, 2, 11, 12, 13, 14, 15, 16, 17, 18, 19], [3] * 20, [4, 5]]
ROWS = len(PROMPTS) * G
RNG = np.random.default_rng(3)
# skewed: one long row among short ones; the long rows first / last; every row at the cap; lognormal
LENGTHS = {
    "one long tail": np.array([2] * (ROWS - 1) + [MAX_NEW]),
    "long first": np.sort(RNG.integers(1, MAX_NEW + 1, ROWS))[::-1].copy(),
    "long last": np.sort(RNG.integers(1, MAX_NEW + 1, ROWS)),
    "all at cap": np.full(ROWS, MAX_NEW),
    "lognormal": np.clip(np.round(RNG.lognormal(np.log(6), 0.9, ROWS)), 1, MAX_NEW).astype(int),
}
# (slots, page_size, refill_every, tail_slots): S below the rows with a tail, and S = rows refilled every step
ENGINES = [(5, 8, 4, 1), (ROWS, 16, 1, ROWS // 2)]


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny", dtype="float32")
    return config, init_params(config, jax.random.key(0))


@pytest.mark.parametrize("engine_shape", ENGINES)
def test_simulated_decode_steps_equal_the_engines(tiny, engine_shape):
    """The same slots, refill rule and lengths: the simulator's step count and slot-steps equal the
    engine's, exactly, on every length set (stop ids the model cannot sample: rows end at their caps)."""
    config, params = tiny
    slots, page_size, refill_every, tail_slots = engine_shape
    for name, lengths in LENGTHS.items():
        stats = {}
        out = generate_paged(params, config, PROMPTS, num_samples=G, temperature=1.0, max_new_tokens=MAX_NEW,
                             stop_token_ids=[config.vocab_size + 7], pad_id=0, rng=jax.random.key(1), slots=slots,
                             page_size=page_size, refill_every=refill_every, tail_slots=tail_slots,
                             caps=lengths.astype(np.int32), prompt_buckets=(WIDTH,), stats=stats)
        np.testing.assert_array_equal(out.lengths, lengths)
        sim = decode_sim.simulate(lengths, [len(p) for p in PROMPTS], group=G, slots=slots, page_size=page_size,
                                  refill_every=refill_every, tail_slots=tail_slots, max_new=MAX_NEW,
                                  prompt_width=WIDTH)
        assert sim.steps == stats["steps"], (name, engine_shape, sim.steps, stats)
        assert sim.slot_steps == stats["slot_steps"], (name, engine_shape, sim.slot_steps, stats)
        assert int(sim.live.sum()) == stats["live_slot_steps"], (name, engine_shape)


def test_simulator_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="lengths"):
        decode_sim.simulate([3, 4, 5], [4, 4], group=2, slots=2)
