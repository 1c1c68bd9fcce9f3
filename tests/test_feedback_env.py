"""Multi-turn episodes with public-test feedback (envs/feedback.py, trainer/episodes.py): feedback
shows public tests only and is bounded, the reward reads the private tests, a truncated or
last answer ends the episode, and a two-turn demo run's batch has the model's tokens (and only
them) in its response mask, the feedback turns as holes, and replays to the same update."""

import dataclasses
import json
import os

import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.data import demo_task
from microcoder_jax.data.problems import Problem, TestCase
from microcoder_jax.data.tokenizer import load_tokenizer
from microcoder_jax.data.prompts import follow_up
from microcoder_jax.envs import CodeTask, FeedbackTask, make_env
from microcoder_jax.envs.config import EnvConfig
from microcoder_jax.envs.feedback import NO_CODE
from microcoder_jax.judge import JudgePool
from microcoder_jax.trainer import batch_files
from microcoder_jax.trainer.episodes import episode_stats
from microcoder_jax.trainer.evaluation import format_table
from microcoder_jax.trainer.loop import train
from microcoder_jax.trainer.replay import _base, replay
from microcoder_jax.trainer.setup import block_fields
from short_demo import short_demo, untimed_rows

PUBLIC_IN, PUBLIC_OUT = "3 4\n", "7\n"
SECRET_IN, SECRET_OUT = "1234567 7654321\n", "8888888\n"  # a private test: must never reach a prompt
ADD = Problem(
    "add",
    [TestCase(PUBLIC_IN, PUBLIC_OUT), TestCase(SECRET_IN, SECRET_OUT), TestCase("0 0\n", "0\n")],
    question_content="Print a + b.",
    metadata={"public_tests": 1},
)
RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
HARD_CODED = "```python\nprint(7)\n```"  # passes the public test only


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=2, timeout=2.0, memory_mb=256) as p:
        yield p


def data_block():
    return block_fields(config_lib.default_config())["data"]


def env(reward="all", turns=2, chars=400):
    return make_env(data_block(), reward, EnvConfig(kind="feedback", max_turns=turns, feedback_chars=chars))


def test_one_turn_is_the_code_task():
    assert isinstance(make_env(data_block(), "all", EnvConfig(kind="feedback", max_turns=1)), CodeTask)
    assert isinstance(env(), FeedbackTask) and env().max_turns == 2


def test_feedback_shows_public_tests_only_and_the_reward_reads_the_private_ones(pool):
    turns = env().step(pool, [ADD] * 4, [RIGHT, WRONG, HARD_CODED, "no code"], 0).result()
    right, wrong, hard, none = turns
    assert right.done and right.reward == 1.0 and right.feedback is None
    assert not wrong.done and wrong.reward == 0.0 and "Example 1: wrong answer" in wrong.feedback
    assert "Input:\n3 4\nExpected output:\n7\nYour output:\n12\n" in wrong.feedback
    assert hard.done and hard.reward == 0.0  # the public test passes (done), the private ones do not
    assert not none.done and none.no_code and none.feedback == NO_CODE
    for t in turns:
        assert SECRET_IN.strip() not in (t.feedback or "") and SECRET_OUT.strip() not in (t.feedback or "")
    fraction = env("fraction").step(pool, [ADD], [HARD_CODED], 0).result()[0]
    assert fraction.reward == 0.0  # of the two private tests, print(7) passes none: the shown one is not scored


def test_the_last_or_a_truncated_answer_ends_the_episode_and_no_public_tests_means_one_turn(pool):
    last = env().step(pool, [ADD], [WRONG], 1).result()[0]
    assert last.done and last.feedback is None
    cut_off = env().step(pool, [ADD], [WRONG], 0, truncated=[True]).result()[0]
    assert cut_off.done and cut_off.feedback is None
    private_only = dataclasses.replace(ADD, metadata={})
    alone = env().step(pool, [private_only], [WRONG], 0).result()[0]
    assert alone.done and alone.reward == 0.0
    with pytest.raises(ValueError, match="turns 0..1"):
        env().step(pool, [ADD], [WRONG], 2)


def test_feedback_is_bounded_whatever_the_test_size(pool):
    big = Problem("big", [TestCase("x" * 100_000 + "\n", "y" * 50_000 + "\n")], metadata={"public_tests": 1})
    (turn,) = env(chars=200).step(pool, [big], ["```python\nprint(input()[:3])\n```"], 0).result()
    assert not turn.done and "more characters cut" in turn.feedback and len(turn.feedback) < 1500
    loud = "```python\nprint('z' * 10_000_000)\n```"  # megabytes of output: 200 characters shown
    (turn,) = env(chars=200).step(pool, [ADD], [loud], 0).result()
    assert f"Your output:\n{'z' * 200}... [cut: 10000001 bytes in all]" in turn.feedback and len(turn.feedback) < 1500


def test_feedback_shows_nothing_printed_and_the_line_an_error_came_from(pool):
    silent, crash = (
        env().step(pool, [ADD] * 2, ["```python\npass\n```", "```python\nxs = []\nprint(xs[1])\n```"], 0).result()
    )
    assert "Your output:\n(nothing)\n" in silent.feedback
    assert "Example 1: runtime error" in crash.feedback and "Your output" not in crash.feedback
    assert "What happened: IndexError: list index out of range (line 2: print(xs[1]))" in crash.feedback


def test_a_judged_turn_crosses_hosts_as_arrays_that_rebuild_it(pool):
    """judge_turn (trainer/episodes.py) judges this host's share and all-gathers arrays: they rebuild
    the environment's Turns (verdict, flags, reward; a digest stands for the program) and give the
    feedback turn's token ids where the episode goes on."""
    from types import SimpleNamespace

    from microcoder_jax.trainer.episodes import feedback_ids, judge_turn

    tok = demo_task.build_tokenizer(demo_task.make_problems(("sum",), 2, 1, 0), ("sum",), data_block(), 384)
    e = EnvConfig(kind="feedback", max_turns=2, feedback_tokens=192)
    run = SimpleNamespace(tokenizer=tok, env_config=e, data=SimpleNamespace(enable_thinking=False))
    texts = [RIGHT, WRONG, HARD_CODED, "no code", WRONG]
    ids = [tok.encode(t + "<|im_end|>", add_special_tokens=False) for t in texts]
    tokens, lengths = np.zeros((5, max(map(len, ids))), np.int32), np.array([len(x) for x in ids])
    for i, x in enumerate(ids):
        tokens[i, : len(x)] = x
    direct = env().step(pool, [ADD] * 5, texts, 0).result()
    turns, feedback = judge_turn(run, env(), pool, [ADD] * 5, tokens, lengths, np.zeros(5, bool), 0, False)
    fields = lambda t: (t.reward, t.passed, t.no_code, t.verdict, t.done)  # noqa: E731
    assert [fields(t) for t in turns] == [fields(t) for t in direct]
    assert turns[1].program == turns[4].program != turns[0].program and turns[3].program is None
    assert feedback[0] is None and feedback[2] is None  # passed; the public test passed (done)
    assert feedback[1] == feedback_ids(tok, direct[1].feedback, "<|im_end|>", 192)
    assert feedback[3] == feedback_ids(tok, NO_CODE, "<|im_end|>", 192)
    _, last = judge_turn(run, env(), pool, [ADD] * 5, tokens, lengths, np.zeros(5, bool), 1, True)
    assert last == [None] * 5  # the last turn: no episode goes on


def test_a_feedback_turn_continues_the_conversation_as_the_template_writes_it():
    problems = demo_task.make_problems(("sum", "product"), 2, 1, 0)
    tok = demo_task.build_tokenizer(problems, ("sum", "product"), data_block(), 384)
    q = [{"role": "user", "content": "Q?"}]
    answer = "```python\nprint(1)\n```"
    later = [{"role": "assistant", "content": answer}, {"role": "user", "content": "It failed."}]
    for thinking in (True, False):
        start = tok.apply_chat_template(q, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)
        more = follow_up(tok, "It failed.", "<|im_end|>", enable_thinking=thinking)
        # the next answer starts after the same assistant header as the first (an empty think block included)
        assert more.endswith(start[start.rindex("<|im_start|>assistant") :])
        if thinking:  # no think block: the whole conversation rendered at once is the same text
            whole = tok.apply_chat_template(q + later, tokenize=False, add_generation_prompt=True, enable_thinking=True)
            assert start + answer + "<|im_end|>" + more == whole
    # an answer that stopped on another token gets the template's own end of turn
    assert follow_up(tok, "It failed.", "<|endoftext|>").startswith("<|im_end|>")


def test_episode_stats_count_passes_by_turn_repairs_and_repeats():
    # four 3-turn episodes: passed at turn 1; repaired at turn 2; never (a repeat at turns 2 and 3);
    # never, changing its program each turn; plus one padding row left out
    turns_used = np.array([1, 2, 3, 3, 3])
    passed_at = np.array([0, 1, 3, 3, 0])
    passed = np.array([True, True, False, False, True])
    repeats = np.array([0, 0, 2, 0, 2])
    s = episode_stats(turns_used, passed_at, passed, np.array([0, 40, 80, 80, 0]), 3, 4, repeats)
    assert s["pass_turn1"] == 0.25 and s["pass_turn2"] == s["pass_turn3"] == 0.5
    assert s["repaired_frac"] == 1 / 3  # of the three first answers that failed, one was repaired
    assert s["repeat_frac"] == 2 / 5  # of the 5 answers after feedback, 2 repeat the program before
    assert s["turns_mean"] == 9 / 4 and s["feedback_tokens_mean"] == 50


@pytest.fixture(scope="module")
def two_turn_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("feedback_run"))
    c = short_demo(
        2,
        **{
            "env.kind": "feedback",
            "env.max_turns": 2,
            "env.feedback_tokens": 192,
            "demo.public_tests": 1,
            "demo.tests_per_problem": 3,
            "train.save_rollouts": (1, 2),
            "demo.held_out_per_op": 1,
            "demo.hidden_op": True,  # the operation only the tests reveal (configs/feedback_task.py)
            "train.eval_every": 2,
            "eval.batch_problems": 5,
            "eval.samples": 2,  # two episodes a problem
            "eval.max_new_tokens": 32,  # the eval's own answer cap, not the training one
        },
    )
    train(c, workdir, log_fn=lambda *a: None)
    return workdir, c


def paged_three_turns(two_turn_run):
    """The two-turn run's config on the paged engine (8 slots) with 3 turns: (Run, its trained
    params, the config)."""
    from microcoder_jax.trainer.evaluation import _load_params
    from microcoder_jax.trainer.setup import setup

    workdir, c = two_turn_run
    c = c.copy_and_resolve_references()
    c.sampling.engine, c.sampling.slots, c.env.max_turns = "paged", 8, 3
    run = setup(c, workdir, config_lib.validate(c))
    params, _ = _load_params(run, workdir, None)
    return run, params, c


@pytest.mark.slow  # a two-turn demo run (~40 s): the quick tier keeps the environment's own tests
def test_two_turn_batches_train_on_the_models_tokens_only(two_turn_run):
    workdir, c = two_turn_run
    rows = [r for r in untimed_rows(workdir) if "loss" in r]  # the training rows (not the eval's)
    assert [r["step"] for r in rows] == [1, 2] and all(np.isfinite(r["loss"]) for r in rows)
    assert all(1.0 <= r["episode_turns_mean"] <= 2.0 for r in rows)
    batch, _ = batch_files.read(_base(workdir, 1))
    tokens, attention, response = (np.asarray(batch[k]) for k in ("tokens", "attention_mask", "response_mask"))
    P = c.data.prompt_buckets[0]
    assert tokens.shape[1] == P + 2 * c.sampling.max_new_tokens + 192
    assert not (response & ~attention.astype(bool)).any()  # every trained token is attended
    assert not response[:, :P].any()  # nothing of the prompt is trained
    holes = attention[:, P:].astype(bool) & ~response[:, P:].astype(bool)
    with_feedback = holes.any(1)
    assert with_feedback.any(), "no episode got feedback in two steps"
    # the holes are the environment's turns: the feedback text, never a private test
    tok = load_tokenizer(os.path.join(workdir, "tokenizer"))
    row = np.flatnonzero(with_feedback)[0]
    shown = tok.decode(tokens[row, P:][holes[row]])
    assert "example tests" in shown or "No Python program" in shown, shown
    assert shown.rstrip().endswith("assistant") or "<think>" in shown  # each ends where the next answer starts
    assert holes.sum(1).max() <= 192  # one feedback turn, within env.feedback_tokens
    assert np.all(np.asarray(batch.sampler_logprobs)[~response.astype(bool)] == 0)
    # the span ends at the last model token: at most the row's attended response
    assert np.all(np.asarray(batch.response_lengths) <= attention[:, P:].sum(1))


@pytest.mark.slow  # a two-turn demo run (~40 s): the quick tier keeps the environment's own tests
def test_evaluation_scores_pass_at_1_after_each_turn(two_turn_run):
    workdir, _ = two_turn_run
    rows = [r for r in untimed_rows(workdir) if "eval_episode_pass_turn1" in r]
    assert [r["step"] for r in rows] == [2]
    (row,) = rows
    assert 0 <= row["eval_episode_pass_turn1"] <= row["eval_episode_pass_turn2"] <= 1
    assert 1 <= row["eval_episode_turns_mean"] <= 2 and 0 <= row["eval_episode_repaired_frac"] <= 1
    assert 0 <= row["eval_episode_repeat_frac"] <= 1
    report = json.load(open(os.path.join(workdir, "eval", "step_2.json")))
    assert "pass@1 after turn 2" in format_table(report) and report["episodes"]["problems"] == 5
    by_turn = report["episodes"]["answers_by_turn"]  # why each turn's answers failed (or passed)
    assert sum(by_turn["turn1"].values()) == 5 * 2  # every episode's first answer, 2 a problem
    assert sum(by_turn.get("turn2", {}).values()) <= 10 and "answers of turn1: " in format_table(report)


@pytest.mark.slow  # a two-turn demo run (~40 s, shared) and both paths' programs (~20 s)
def test_kept_kv_episodes_sample_what_re_prefilled_ones_sample(two_turn_run, pool, monkeypatch):
    """The paged engine keeps each row's KV across turns (HeldTurns) where the static path
    re-prefills the whole conversation (PrefilledTurns): greedy, with the two-turn run's trained
    params, the same episodes token for token."""
    import collections

    import jax

    from microcoder_jax.trainer.episodes import collect_episodes, turn_sampler
    from microcoder_jax.trainer.rollout import sampler_for

    run, params, c = paged_three_turns(two_turn_run)
    problems, prompts = run.prompt_set.problems[:4], run.prompt_set.prompts[:4]
    from microcoder_jax.sampling import paged_sampler

    extends, real_extend = [], paged_sampler.engine.extend

    def recorded(*args, **kwargs):  # what the session's extend calls run at: the planner plans that
        extends.append((kwargs["shape"], args[3].shape))
        return real_extend(*args, **kwargs)

    monkeypatch.setattr(paged_sampler.engine, "extend", recorded)
    got = {}
    for keep in (True, False):
        got[keep] = collect_episodes(
            run, sampler_for(run), turn_sampler(run), pool, params, problems, prompts,
            temperature=0.0, rng=jax.random.key(0), times=collections.Counter(), keep_kv=keep,
        )  # fmt: skip
    (held, _, held_stats), (fresh, _, fresh_stats) = got[True], got[False]
    monkeypatch.undo()
    from microcoder_jax.plan import paged as plan_paged, planner

    planned = c.copy_and_resolve_references()
    planned.data.num_prompts = len(prompts)  # this call's episodes
    mesh = planner.abstract_mesh(planned, 1)
    progs = {p.name: p for p in plan_paged.step_programs(planned, config_lib.rl_config_of(planned), mesh, False)}
    shape, tail = progs["sample extend"].kwargs["shape"], progs["sample extend"].args[3].shape
    assert extends and set(extends) == {(shape, tail)}, (extends[0], shape, tail)
    assert held_stats["turns_mean"] > 1.5, held_stats  # most episodes went on after feedback
    cost = "later_prefill_tokens"  # only the feedback turns' tokens are prefilled again
    assert 0 < held_stats.pop(cost) < 0.6 * fresh_stats.pop(cost), (held_stats, fresh_stats)
    assert held_stats == fresh_stats
    for field in ("tokens", "attention_mask", "response_mask", "response_lengths", "rewards"):
        np.testing.assert_array_equal(getattr(held, field), getattr(fresh, field), err_msg=field)
    np.testing.assert_allclose(held.sampler_logprobs, fresh.sampler_logprobs, atol=1e-4)
    # sampled episodes of other problems continue and end other numbers of rows: no new program
    from microcoder_jax.sampling import paged_engine

    sizes = (paged_engine.extend._cache_size(), paged_engine.drop._cache_size())
    _, _, stats = collect_episodes(
        run, sampler_for(run), None, pool, params, run.prompt_set.problems[4:8], run.prompt_set.prompts[4:8],
        temperature=1.0, rng=jax.random.key(1), times=collections.Counter(),
    )  # fmt: skip
    assert stats["turns_mean"] != held_stats["turns_mean"]  # another count of rows went on
    after = (paged_engine.extend._cache_size(), paged_engine.drop._cache_size())
    assert after == sizes, (after, sizes, stats, held_stats)


@pytest.mark.slow  # the two-turn demo run (shared) and three paged sessions (~30 s)
def test_turns_overlap_and_a_rows_tokens_do_not_depend_on_when_it_went_on(two_turn_run, pool, monkeypatch):
    """HeldTurns judges rows as they finish and continues them beside rows still on an earlier
    turn; with sampling.episodes_in_flight it holds at most that many episodes (a smaller pool).
    Sampled at T = 1 the episodes are the same token for token whether the turns run whole, overlap,
    or hold 8 episodes at a time, and every page is free again at the end."""
    import jax

    from microcoder_jax.trainer import episodes

    run, params, c = paged_three_turns(two_turn_run)
    problems, prompts = run.prompt_set.problems[:6], run.prompt_set.prompts[:6]
    rounds, sessions = [], []
    real_judge, real_close = episodes.judge_turn, episodes.HeldTurns.close

    def judge(run, env, pool, on, *rest):  # (tokens, lengths, truncated, turn, last)
        rounds.append((rest[3], len(on)))
        return real_judge(run, env, pool, on, *rest)

    def close(self):  # what the session held at the end, and the most episodes it held at once
        free = int(jax.device_get(self.session.state["pages"].count))
        sessions.append((free, self.session.shape.num_pages, self.in_flight))
        real_close(self)

    monkeypatch.setattr(episodes, "judge_turn", judge)
    monkeypatch.setattr(episodes.HeldTurns, "close", close)
    live, real_push = [], episodes.HeldTurns._push
    monkeypatch.setattr(episodes.HeldTurns, "_push", lambda self: (real_push(self), live.append(self.live)))
    eight = dataclasses.replace(run, sampling=dataclasses.replace(run.sampling, episodes_in_flight=8))
    got, log = {}, {}
    for name, r, every in (("whole", run, 0), ("overlapped", run, 4), ("eight", eight, 4)):
        rounds.clear(), live.clear()
        got[name] = collect_episodes_of(r, pool, params, problems, prompts, every)
        log[name] = list(rounds)
    n = len(prompts) * c.sampling.group_size
    assert [t for t, _ in log["whole"]] == list(range(len(log["whole"]))), log["whole"]  # a round a turn
    order = [t for t, _ in log["overlapped"]]
    assert any(a > b for i, a in enumerate(order) for b in order[i + 1 :]), order  # a turn-2 answer came first
    assert sum(k for t, k in log["overlapped"] if t == 0) == n and max(order) >= 1
    (whole, _, whole_stats), (over, _, over_stats), (eight_out, _, eight_stats) = got.values()
    assert whole_stats["turns_mean"] > 1.3, whole_stats  # most episodes went on
    for out, stats in ((over, over_stats), (eight_out, eight_stats)):
        stats, ref = dict(stats), dict(whole_stats)
        stats.pop("later_prefill_tokens"), ref.pop("later_prefill_tokens")  # padding differs by block
        assert stats == ref
        for field in ("tokens", "attention_mask", "response_mask", "response_lengths", "rewards", "temperature"):
            np.testing.assert_array_equal(getattr(out, field), getattr(whole, field), err_msg=field)
        np.testing.assert_allclose(out.sampler_logprobs, whole.sampler_logprobs, atol=1e-5)
    assert [m for _, _, m in sessions] == [n, n, 8] and max(live) <= 8 and len(set(live)) > 2  # pushes as episodes end
    assert sessions[2][1] < sessions[0][1] / 2  # the pool of 8 episodes, not of every one
    assert all(free == pages for free, pages, _ in sessions), sessions  # no page leaked


def collect_episodes_of(run, pool, params, problems, prompts, report_every):
    import collections

    import jax

    from microcoder_jax.trainer.episodes import collect_episodes
    from microcoder_jax.trainer.rollout import sampler_for

    return collect_episodes(
        run, sampler_for(run), None, pool, params, problems, prompts, temperature=1.0, rng=jax.random.key(3),
        times=collections.Counter(), report_every=report_every,
    )  # fmt: skip


@pytest.mark.slow  # a two-turn demo run (~40 s): the quick tier keeps the environment's own tests
def test_a_two_turn_step_replays_to_the_same_update(two_turn_run):
    workdir, _ = two_turn_run
    row, diffs = replay(workdir, 2, log_fn=lambda *a: None)
    assert diffs == {} and row["episode_turns_mean"] >= 1.0


def test_the_two_turn_warm_start_shows_the_feedback_a_failing_answer_gets():
    from microcoder_jax.trainer.warm_start import feedback_batch

    problems = demo_task.make_problems(("sum", "product"), 3, 3, 0, public_tests=1, hidden_op=True)
    data = data_block()
    tok = demo_task.build_tokenizer(problems, ("sum", "product"), data, 384)
    cfg = EnvConfig(kind="feedback", max_turns=2, feedback_tokens=256)
    tokens, attention, loss = feedback_batch(
        tok, problems, ("sum", "product"), data, 40, np.random.default_rng(0), env_config=cfg
    )
    P = tokens.shape[1] - cfg.row_width(0, 40)
    assert tokens.shape == (6, cfg.row_width(P, 40)) and not loss[:, :P].any()
    assert not (loss & (1 - attention)).any()
    two = [i for i in range(6) if ((attention[i, P:] == 1) & (loss[i, P:] == 0)).any()]
    assert two and len(two) < 6  # a random operation sometimes passes the public test: one turn then
    for i in two:
        hole = (attention[i, P:] == 1) & (loss[i, P:] == 0)
        text = tok.decode(tokens[i, P:][hole])
        test = problems[i].tests[0]
        assert "Expected output" in text and test.output.strip() in text and test.input.split()[0] in text
        assert tok.decode(tokens[i, P:][loss[i, P:] == 1]).count("```python") == 2  # two answers trained


def test_a_warm_start_that_reads_the_feedback_answers_the_operation_it_points_to():
    """demo.warm_start_reads=1: every second answer is the operation the public example's expected
    output points to; 0 keeps the random second answers of runs before the knob (same rows)."""
    from microcoder_jax.trainer.warm_start import feedback_batch

    ops = ("sum", "difference", "product", "maximum", "minimum")
    problems = demo_task.make_problems(ops, 4, 3, 0, public_tests=1, hidden_op=True)
    data = data_block()
    tok = demo_task.build_tokenizer(problems, ops, data, 384)
    cfg = EnvConfig(kind="feedback", max_turns=2, feedback_tokens=256)

    def batch(**kw):
        return feedback_batch(tok, problems, ops, data, 40, np.random.default_rng(0), env_config=cfg, **kw)

    for got, before in zip(batch(reads=0.0), batch()):
        np.testing.assert_array_equal(got, before)
    tokens, attention, loss = batch(reads=1.0)
    P = tokens.shape[1] - cfg.row_width(0, 40)
    second = {op: demo_task.response_text(op) for op in ops}
    two = 0
    for i, problem in enumerate(problems):
        answers = tok.decode(tokens[i, P:][loss[i, P:] == 1]).split("```python")
        if len(answers) < 3:  # the first answer passed the public test: one turn
            continue
        two += 1
        # the second answer's program is the problem's own operation (the only one fitting every test)
        assert "```python" + answers[2] == second[problem.metadata["op"]] + tok.eos_token, (i, answers)
    assert two >= len(problems) // 2


def test_the_copy_task_hides_a_constant_that_a_failing_examples_feedback_shows(pool):
    """configs/feedback_task.py:copy: f(a, b) is a constant the statement never names; the public
    example's expected output is that constant, so a failing first answer's feedback holds the
    answer, and the reference program passes the private tests."""
    from microcoder_jax.cli import load_config

    config = load_config(os.path.join(config_lib.config_dir(), "feedback_task.py:copy"), [])
    assert config.demo.ops == tuple(demo_task.CONSTANTS) and config.env.kind == "feedback"
    assert load_config(os.path.join(config_lib.config_dir(), "feedback_task.py:copy-single"), []).env.kind == "code"
    problems = demo_task.make_problems(("three", "seven"), 2, 3, 0, public_tests=1, hidden_op=True)
    assert {p.question_content for p in problems} == {demo_task.HIDDEN_STATEMENT}
    seven = [p for p in problems if p.metadata["op"] == "seven"]
    assert all(t.output == "7\n" for p in seven for t in p.tests)
    wrong = env().step(pool, seven[:1], [demo_task.response_text("three")]).result()[0]
    assert not wrong.done and "Expected output:\n7" in wrong.feedback
    right = env().step(pool, seven[:1], [demo_task.response_text("seven")]).result()[0]
    assert right.passed and right.done and right.reward == 1.0
