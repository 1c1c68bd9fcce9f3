"""The paged engine in the rollout: groups judged as they finish give the rows and rewards of judging
afterwards; a split of rows between hosts judges every row once; DAPO refills go into one running
session (a new one only for a wider prompt bucket) and give a full batch; the static path still works."""

import types

import jax
import numpy as np
import pytest

from microcoder_jax import models
from microcoder_jax.config import default_config
from microcoder_jax.envs import make_env
from microcoder_jax.judge import Problem, TestCase
from microcoder_jax.judge.pool import JudgePool
from microcoder_jax.rl.dynamic_sampling import GroupBuffer, informative_groups, refill_certain
from microcoder_jax.trainer.rollout import GroupJudge, collect, generate, sampler_for
from microcoder_jax.trainer.setup import block_fields
from microcoder_jax.trainer.step_batch import collect_step
from microcoder_jax.sampling import paged_sampler

G, MAX_NEW = 4, 12


class ParityTokenizer:
    """Decodes a response to a program printing its first token's parity: rewards follow the tokens."""

    def batch_decode(self, rows, skip_special_tokens=True):
        return [f"```python\nprint({row[0] % 2})\n```" if row else "" for row in rows]


def problem(name, answer):
    return Problem(name, [TestCase("", f"{answer}\n")])


EVEN, ODD, NEVER = problem("even", 0), problem("odd", 1), problem("never", 2)


def make_run(engine="paged", dynamic=False, buckets=(16,), max_refills=3, slots=3):
    config = default_config()
    config.data.prompt_buckets = buckets
    config.data.num_prompts = 2
    config.sampling.engine, config.sampling.group_size, config.sampling.max_new_tokens = engine, G, MAX_NEW
    config.sampling.slots, config.sampling.page_size, config.sampling.refill_every = slots, 8, 1
    config.rl.dynamic_sampling, config.train.max_refills, config.rl.micro_batch_size = dynamic, max_refills, 4
    config.judge.reward = "all"
    model_config = models.get_preset("tiny", vocab_size=64, dtype="float32")
    return types.SimpleNamespace(
        config=config,
        model_config=model_config,
        **block_fields(config),
        stop_ids=(1,),
        pad_id=0,
        mesh=None,
        sample_mesh=None,
        tokenizer=ParityTokenizer(),
        env=make_env(block_fields(config)["data"], "all"),
    )


@pytest.fixture(scope="module")
def params():
    return models.init_params(models.get_preset("tiny", vocab_size=64, dtype="float32"), jax.random.PRNGKey(0))


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=2, timeout=2.0, memory_mb=256) as p:
        yield p


class CountingPool:
    """The pool, counting submit calls."""

    def __init__(self, pool):
        self.pool, self.submits = pool, 0

    def submit(self, *args, **kwargs):
        self.submits += 1
        return self.pool.submit(*args, **kwargs)


def times():
    return {"sample": 0.0, "judge": 0.0, "judge_wait": 0.0}


class OrderPool(CountingPool):
    """The pool, counting submit calls and recording which problem each submission judged."""

    def __init__(self, pool):
        super().__init__(pool)
        self.order = []

    def submit(self, problems, *args, **kwargs):
        self.order.append(problems[0].question_id)
        return super().submit(problems, *args, **kwargs)


# in_order: three short prompts, the groups finishing in index order (slots=3 < 12 rows);
# out_of_order: every row in one session (12 slots) at a low temperature, where the tiny model repeats
# its prompt's last token: the last group's prompt ends in a stop id (14), so its rows stop at once,
# while the earlier (much longer) prompts run to the cap: the last group is judged first.
ORDER_CASES = {
    "in_order": dict(
        slots=3,
        stop_ids=(1,),
        temperature=1.0,
        seed=3,
        problems=[EVEN, ODD, problem("even2", 0)],
        prompts=[[5, 6, 7], [8, 9, 10, 11, 12], [13, 14]],
        order=["even", "odd", "even2"],
    ),
    "out_of_order": dict(
        slots=3 * G,
        stop_ids=(14,),
        temperature=0.05,
        seed=4,
        problems=[EVEN, ODD, problem("even2", 0)],
        prompts=[list(range(20, 34)), [8, 9, 10, 11, 12], [13, 14, 14, 14]],
        order=["even2", "even", "odd"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ORDER_CASES))
def test_groups_judged_as_they_finish_match_judging_afterwards(params, pool, case):
    c = ORDER_CASES[case]
    run = make_run(slots=c["slots"])
    run.stop_ids = c["stop_ids"]
    problems, prompts, temperature, rng = c["problems"], c["prompts"], c["temperature"], jax.random.PRNGKey(c["seed"])
    judged = OrderPool(pool)
    rollout, counts = collect(
        run,
        judged,
        params,
        problems,
        prompts,
        temperature=temperature,
        rng=rng,
        times=times(),
    )
    assert judged.submits == len(problems)  # one submission per group, as each finished
    assert judged.order == c["order"]  # out_of_order: a later group reached the judge first
    sample = generate(
        run,
        params,
        prompts,
        num_samples=G,
        temperature=temperature,
        max_new_tokens=MAX_NEW,
        top_p=1.0,
        top_k=0,
        rng=rng,
    )
    np.testing.assert_array_equal(rollout.tokens[:, -MAX_NEW:], sample.tokens)
    np.testing.assert_array_equal(rollout.response_lengths, sample.lengths)
    codes = [f"print({row[0] % 2})" for row in sample.tokens]
    results = pool.judge([p for p in problems for _ in range(G)], codes)
    np.testing.assert_array_equal(rollout.rewards, [float(r.passed) for r in results])
    np.testing.assert_array_equal(rollout.passed, [r.passed for r in results])
    assert sum(counts.values()) == len(problems) * G and 0 < rollout.rewards.sum() < len(rollout.rewards)


def test_rows_split_between_hosts_are_each_judged_once_in_row_order(pool):
    run = make_run()
    problems = [EVEN, ODD, EVEN]  # 12 rows; two hosts take 0..6 and 6..12: group 1 is split
    tokens = np.arange(12, dtype=np.int32)[:, None].repeat(3, 1)
    lengths = np.full(12, 3, np.int32)
    judges = [
        GroupJudge(run, pool, problems, G, rows=slice(0, 6)),
        GroupJudge(run, pool, problems, G, rows=slice(6, 12)),
    ]
    for index in (2, 0, 1):  # groups arrive out of order
        group = types.SimpleNamespace(
            tokens=tokens[index * G : (index + 1) * G], lengths=lengths[index * G : (index + 1) * G]
        )
        for judge in judges:
            judge.add(index, group)
    assert all(judge.complete for judge in judges)
    got = [r.passed for judge in judges for r in judge.results()]
    assert got == [row % 2 == [0, 1, 0][row // G] for row in range(12)]
    known, rewards = judges[1].known()
    assert known.all() and rewards.tolist() == [float(x) for x in got[6:]]
    with pytest.raises(RuntimeError, match="never submitted"):
        GroupJudge(run, pool, problems, G, rows=slice(0, 6)).results()


def test_refill_is_certain_only_when_pending_groups_cannot_fill():
    buffer = GroupBuffer()
    known, rewards = np.array([1, 1, 1, 1, 0, 0], bool), np.array([1, 0, 0, 0, 0, 0], np.float32)  # G=2
    # groups: informative (known), all-equal (known), not judged yet
    assert not refill_certain(buffer, [(known, rewards)], group_size=2, num_prompts=2)
    assert refill_certain(buffer, [(known, rewards)], group_size=2, num_prompts=3)
    assert refill_certain(buffer, [(np.ones(6, bool), rewards)], group_size=2, num_prompts=2)


class CountingSession(paged_sampler.PagedSession):
    shapes: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        CountingSession.shapes.append(self.full_shape)


def prompt_feed(batches):
    it = iter(batches)
    return lambda: next(it)


def check_pending(pending):
    """The judged step batch of a PendingStep; its rows (what the learner scores) are the batch's,
    and the rollout side computed no old log-probs (the learner does)."""
    got = pending.wait()
    for name, value in pending.rows.items():
        np.testing.assert_array_equal(value, getattr(got.batch, name))
    assert got.batch.old_logprobs is None and got.batch.ref_logprobs is None
    return got


def check_full_batch(got, width):
    rows = 2 * G
    assert got.batch.rewards.shape == (rows,) and got.batch.tokens.shape == (rows, width + MAX_NEW)
    informative = informative_groups(got.batch.rewards, G)
    assert informative.sum() + got.ds_stats.get("ds_filled_groups", 0) == 2
    assert sum(got.verdicts.values()) == got.generations * rows
    assert got.ds_stats["ds_generations"] == got.generations


NEVERS = ([NEVER, NEVER], [[5, 6], [7, 8]])  # groups that can never differ: a refill is certain


@pytest.mark.slow
@pytest.mark.parametrize("case", ["one_session", "session_full", "wider_refill"])
def test_dynamic_sampling_pushes_refills_into_a_running_session(params, pool, monkeypatch, case):
    monkeypatch.setattr(paged_sampler, "PagedSession", CountingSession)
    CountingSession.shapes = []
    run = make_run(dynamic=True, buckets=(16, 32), max_refills=1 if case == "one_session" else 3)
    refill = [30 + i for i in range(20)] if case == "wider_refill" else [30, 31, 32]  # bucket 32 or 16
    lead = [NEVERS] * (3 if case == "session_full" else 1)
    batches = lead + [([EVEN, ODD], [refill, refill[::-1]])] * 3
    counting = CountingPool(pool)
    pending = collect_step(
        run,
        sampler_for(run),
        counting,
        params,
        prompt_feed(batches),
        temperature=1.0,
        key_for=lambda k: jax.random.PRNGKey(10 + k),
        times=times(),
    )
    got = check_pending(pending)
    assert got.generations >= len(lead) + 1 and got.sessions == len(CountingSession.shapes)
    assert counting.submits == got.generations * 2  # every group went to the judge on its own
    widths = [shape.prompt_width for shape in CountingSession.shapes]
    if case == "one_session":  # the batch and its refill: one session with room for both
        assert got.generations == 2 and widths == [16] and CountingSession.shapes[0].max_prompts == 4
    elif case == "session_full":  # two batches per session; the next session has the same programs
        assert len(widths) == -(-got.generations // 2) and len(set(CountingSession.shapes)) == 1
    else:  # the refills need bucket 32: a second session at that width after the first drains
        assert widths == [16, 32]
    check_full_batch(got, 32 if case == "wider_refill" else 16)


def test_dynamic_sampling_on_the_static_engine_refills_with_new_calls(params, pool):
    run = make_run(engine="static", dynamic=True)
    batches = [([NEVER, NEVER], [[5, 6], [7, 8]])] + [([EVEN, ODD], [[30, 31], [32, 33]])] * 3
    pending = collect_step(
        run,
        sampler_for(run),
        pool,
        params,
        prompt_feed(batches),
        temperature=1.0,
        key_for=lambda k: jax.random.PRNGKey(10 + k),
        times=times(),
    )
    got = check_pending(pending)
    assert got.generations >= 2 and got.sessions == 0
    check_full_batch(got, 16)


@pytest.mark.slow
def test_eval_judges_each_problem_as_its_samples_finish(params, pool, monkeypatch):
    """Evaluation on the paged engine sends each problem's samples to the pool as they finish (never
    the padding prompt's), the static one a batch at once; both judge the rows they sampled."""
    from microcoder_jax.trainer import evaluation as ev
    from microcoder_jax.trainer import rollout
    from microcoder_jax.data import loader

    problems, prompts = [EVEN, ODD, NEVER], [[5, 6, 7], [8, 9, 10, 11, 12], [13, 14]]
    monkeypatch.setattr(
        loader,
        "make_prompt_set",
        lambda probs, tokenizer, data, **_: types.SimpleNamespace(
            problems=list(probs), prompts=prompts[: len(probs)], skipped_too_long=0
        ),
    )
    samples, passes = [], []
    real_generate = rollout.generate
    monkeypatch.setattr(rollout, "generate", lambda *a, **k: samples.append(real_generate(*a, **k)) or samples[-1])
    monkeypatch.setattr(ev, "summarize", lambda kept, p, **kw: passes.append(p) or {})
    answers = {"even": 0, "odd": 1, "never": 2}
    for engine, calls in (("paged", 3), ("static", 2)):  # batches of 2 problems: [even, odd], [never + pad]
        run = make_run(engine)
        run.eval = run.eval.replace(batch_problems=2, samples=G, max_new_tokens=MAX_NEW)
        counting = CountingPool(pool)
        samples.clear()
        ev.evaluate_problems(run, counting, params, problems, rng=jax.random.key(3))
        assert counting.submits == calls
        first = np.concatenate([s.tokens[:, 0] for s in samples])  # rows of [even, odd] then [never, pad]
        want = [[int(first[i * G + j]) % 2 == answers[p.question_id] for j in range(G)] for i, p in enumerate(problems)]
        assert passes[-1] == want, engine
        assert any(map(any, want)) and not all(map(all, want))  # both verdicts occur
