"""The truncation task (data/truncation_task.py, configs/truncation_task.py) and the experiment
commands (microcoder_jax.experiments): the task's answers, its config, and shortened runs."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from microcoder_jax.cli import load_config
from microcoder_jax.config import blocks
from microcoder_jax.config import validate
from microcoder_jax.data import truncation_task as tt
from microcoder_jax.judge.extract import extract_code
from microcoder_jax.experiments.cli import parse_args
from microcoder_jax.experiments.report import SHORT_NOTE, write_outputs
from microcoder_jax.experiments.rows import series, training_rows
from microcoder_jax.experiments.runner import CONFIG_FILE, Arm, run_all, run_config
from microcoder_jax.experiments.stats import paired
from microcoder_jax.experiments.summary import end_length_curves, length_curve, run_summary, summarize
from microcoder_jax.experiments.tables import length_table, paired_table, table

CONFIG = CONFIG_FILE
OPS = ("sum", "difference", "product", "maximum", "minimum")


@pytest.fixture(scope="module")
def task():
    """The task's problems, data block and tokenizer as configs/truncation_task.py builds them."""
    typed = blocks(load_config(f"{CONFIG}:grpo"))
    d = typed["demo"]
    problems = tt.make_problems(d.ops, d.problems_per_op, d.tests_per_problem, 0, d.phrasings)
    return problems, typed, tt.build_tokenizer(problems, d.ops, typed["data"], d.vocab_size)


def test_majority_and_votes():
    rng = np.random.default_rng(0)
    assert tt.majority(["sum", "product", "sum"], rng) == "sum"
    assert {tt.majority(["sum", "product"], rng) for _ in range(50)} == {"sum", "product"}  # ties at random
    votes = tt.draw_votes("sum", OPS, 20000, 0.3, rng)
    share = {op: votes.count(op) / len(votes) for op in OPS}
    assert abs(share["sum"] - 0.3) < 0.02 and all(abs(share[o] - 0.175) < 0.02 for o in OPS[1:])


def test_more_votes_make_the_majority_right_more_often():
    rng = np.random.default_rng(1)
    right = {
        k: np.mean([tt.majority(tt.draw_votes("sum", OPS, k, 0.3, rng), rng) == "sum" for _ in range(600)])
        for k in (1, 10, 40)
    }
    assert right[1] < right[10] < right[40] and right[40] - right[1] > 0.25


def test_chained_votes_settle_so_the_last_vote_is_right_more_often_with_length():
    """The task's vote rule (configs/truncation_task.py): a chain whose last vote names the prompt's
    operation with the chance `last_vote_right` gives, which grows with the number of votes."""
    rng = np.random.default_rng(2)
    chain = (0.03, 0.98)
    for k in (1, 12, 25):
        right = np.mean([tt.draw_chain("sum", OPS, k, 0.2, chain, rng)[-1] == "sum" for _ in range(3000)])
        assert abs(right - tt.last_vote_right(k, 0.2, chain)) < 0.03, (k, right)
    assert (
        tt.last_vote_right(1, 0.2, chain)
        == 0.2
        < tt.last_vote_right(12, 0.2, chain)
        < tt.last_vote_right(25, 0.2, chain)
    )
    text = tt.answer_for(tt.make_problems(OPS, 1, 1, 0)[0], OPS, (3, 3), 0.2, rng, chain)
    votes = text.split("</think>")[0].split()[1:]
    assert len(votes) == 3 and extract_code(text) == tt.demo_task.program(votes[-1])  # the last vote's program


def test_answers_are_judged_only_when_whole(task):
    problems, typed, tok = task
    text = tt.response_text(["sum", "product", "sum"], "sum")
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text and extract_code(text) == "a, b = map(int, input().split())\nprint(a + b)"
    # every vote is one token, so the policy sets its length one vote at a time
    assert len(tok.encode(tt.response_text(["sum"] * 11, "sum"), add_special_tokens=False)) == len(ids) + 8
    for cut in (3, len(ids) - 12, len(ids) - 1):  # inside the scratchpad, the program, the last fence
        assert extract_code(tok.decode(ids[:cut])) is None  # no program: no_code, not judged wrong


def test_warm_start_lengths_spread_around_the_cap(task):
    problems, typed, tok = task
    d, cap = typed["demo"], typed["sampling"].max_new_tokens
    lengths = tt.answer_lengths(tok, problems, d.ops, d.votes, d.vote_accuracy, 2000)
    over = float(np.mean(lengths > cap))
    assert 0.2 <= over <= 0.5, over  # the 20-50% truncated at the start of RL
    assert lengths.min() < cap - 15 and lengths.max() > cap + 5


def test_warm_start_batch_cuts_long_answers_without_end_token(task):
    problems, typed, tok = task
    d, cap = typed["demo"], typed["sampling"].max_new_tokens
    tokens, attention, loss_mask = tt.warm_start_batch(
        tok,
        problems[:64],
        d.ops,
        typed["data"],
        cap,
        np.random.default_rng(0),
        votes_range=d.votes,
        accuracy=d.vote_accuracy,
    )
    answers = tokens[:, -cap:]
    full = attention[:, -cap:].sum(1) == cap
    ends = np.array([tok.eos_token_id in row[m > 0] for row, m in zip(answers, attention[:, -cap:])])
    assert full.any() and (~full).any()
    assert not ends[full & ~(answers[:, -1] == tok.eos_token_id)].any()  # cut rows: no end token
    assert ends[~full].all() and (loss_mask[:, -cap:] == attention[:, -cap:]).all()


@pytest.mark.parametrize(
    "arg, rule, rho",
    [
        ("grpo", "none", None),
        ("overlong_filter", "overlong_filter", None),
        ("conditional_0.3", "conditional", 0.3),
        ("soft_overlong", "soft_overlong", None),
        ("", "conditional", 0.1),
    ],
)
def test_config_argument_is_the_rule(arg, rule, rho):
    config = load_config(f"{CONFIG}:{arg}" if arg else CONFIG)
    rl = validate(config)["rl"]
    assert rl.truncation == rule and config.demo.votes == (1, 40)
    if rho is not None:
        assert rl.rho == rho
    assert rl.soft_overlong_cache == config.sampling.max_new_tokens // 4


@pytest.mark.parametrize("arg", ["conditional_x", "grpo_0.1", "nothing"])
def test_bad_config_argument(arg):
    with pytest.raises(Exception, match="truncation_task.py"):
        load_config(f"{CONFIG}:{arg}")


SMOLLM2 = os.path.join(os.path.dirname(CONFIG), "smollm2.py")


def test_real_model_config_takes_the_same_rules():
    """configs/smollm2.py:RULE sets only the truncation rule (the cap's quarter for soft_overlong);
    without RULE it is the microcoder preset's conditional mask, so its conditional_0.1 run is the
    plain config's; a bad RULE names the file."""
    plain = validate(load_config(SMOLLM2))["rl"]
    assert (plain.truncation, plain.rho) == ("conditional", 0.1)
    for arg, rule in (("grpo", "none"), ("overlong_filter", "overlong_filter"), ("conditional_0.1", "conditional")):
        config = load_config(f"{SMOLLM2}:{arg}")
        rl = validate(config)["rl"]
        assert rl.truncation == rule and rl.soft_overlong_cache == config.sampling.max_new_tokens // 4 == 40
        assert dataclasses.replace(rl, truncation="conditional", soft_overlong_cache=1024) == plain
        assert config.judge.reward == "fraction_reads" and config.model.path == "smollm2"
    with pytest.raises(Exception, match=r"configs/smollm2.py:overlong: expected one of"):
        load_config(f"{SMOLLM2}:overlong")


def test_summary_and_table_from_rows():
    rows = [
        {
            "step": s,
            "reward_mean": s / 10,
            "response_length_mean": 30 + s,
            "truncation_rate": 0.1,
            "masked_fraction": 0.0,
            "no_code_rate": 0.1,
            "diversity": 0.5,
            "temperature": 1.0 if s < 6 else 1.2,
        }
        for s in range(1, 9)
    ]
    arm = Arm("a", "grpo", label="A")
    summary = summarize([arm], {"a": {0: (rows, {"wall_s": 1.0, "cpu_s": 1.0})}}, 8, {})
    seed = summary["arms"]["a"]["seeds"]["0"]
    assert seed["start"]["reward"] == 0.1 and seed["end"]["length"] == 38  # 1-step windows
    assert seed["temperature_path"] == [[1, 1.0], [6, 1.2]] and seed["peak_reward_step"] == 8
    assert "| A | 0.1 → 0.8 | 31 → 38 |" in table(summary)  # one seed: no spread
    two = {0: (rows, {"wall_s": 1.0, "cpu_s": 1.0}), 1: ([dict(r, reward_mean=1.4) for r in rows], {})}
    summary = summarize([arm], {"a": two}, 8, {})
    summary["arms"]["a"]["over_seeds"]["end_length"]["std"] = 2.2e-16  # np.std of equal floats
    assert "| A | 0.75 → 1.1 ± 0.3 | 31 → 38 ± 0 |" in table(summary)


def test_a_short_runs_table_says_it_is_not_a_result(tmp_path):
    rows = [{"step": s, "reward_mean": 0.0, "response_length_mean": 30.0} for s in range(1, 4)]
    arm = Arm("a", "grpo", label="A")
    results = {"a": {0: (rows, {"wall_s": 1.0, "cpu_s": 1.0})}}
    for short in (True, False):
        summary = summarize([arm], results, 3, {"short": short})
        write_outputs(str(tmp_path), summary, results, [arm], lambda *a: None)
        text = (tmp_path / "table.md").read_text()
        assert text.startswith(f"**{SHORT_NOTE}**") == short and ("not a result" in text) == short


def test_held_out_start_and_end_come_from_the_evaluations_around_the_run():
    """Held-out values: start = the evaluation before RL step 1, end = the one after the last step;
    training quantities ignore the evaluations' rows; the length curve counts each seed once."""
    train = [{"step": s, "reward_mean": 0.1 * s, "response_length_mean": 30.0} for s in range(1, 9)]
    evals = [
        {"step": s, "eval_pass@1": p, "eval_pass@8": q, "eval_greedy_pass@1": g}
        for s, p, q, g in ((0, 0.2, 0.5, 0.2), (4, 0.3, 0.6, 0.4), (8, 0.35, 0.7, 0.6))
    ]
    rows = sorted(train + evals, key=lambda r: r["step"])
    curve = [
        {"from": 1, "to": 7, "answers": 10, "pass_rate": 0.2},
        {"from": 50, "to": 56, "answers": 30, "pass_rate": 0.5},
    ]
    run = run_summary(rows, 8, {0: {"lengths": {"by_length": curve}}})
    assert run["start"]["greedy_pass1"] == 0.2 and run["end"]["greedy_pass1"] == 0.6
    assert run["start"]["pass8"] == 0.5 and run["end"]["pass1"] == 0.35
    assert run["start"]["reward"] == 0.1 and run["end"]["reward"] == 0.8 and np.isnan(run["end"]["eval_length"])
    arm_a, arm_b = Arm("a", "grpo"), Arm("b", "grpo")
    results = {
        "a": {
            0: (rows, {}, {0: {"lengths": {"by_length": curve}}}),
            1: (rows, {}, {0: {"lengths": {"by_length": curve[:1]}}}),
        },
        "b": {0: (rows, {}, {0: {"lengths": {"by_length": curve}}})},  # seed 0 again: not counted twice
    }
    pooled = length_curve(summarize([arm_a, arm_b], results, 8, {}))
    assert pooled == [
        {"from": 1, "to": 7, "answers": 20, "pass_rate": 0.2, "seeds": 2},
        {"from": 50, "to": 56, "answers": 30, "pass_rate": 0.5, "seeds": 2},
    ]
    ends = end_length_curves(summarize([arm_a, arm_b], results, 8, {}))
    assert ends["a"] == [] and ends["b"] == []  # no evaluation after step 8 in these reports
    text = length_table({"start": pooled, "other": [dict(pooled[0], answers=3)]})
    assert "| 50-56 | 0.50 (30) |  |" in text and "| 1-7 | 0.20 (20) |  |" in text  # < 5 answers: blank


def test_short_runs_one_seed_and_bad_counts_are_refused(capsys):  # both experiments parse with parse_args
    name = "python -m microcoder_jax.experiments.truncation"
    assert parse_args(["--out", "x", "--short"], name, None, 3, 40).seeds == 1
    assert parse_args(["--out", "x", "--short", "--seeds", "2"], name, None, 3, 40).seeds == 2
    assert vars(parse_args(["--out", "x"], name, None, 3, 40)) | {"out": ""} == {
        "out": "",
        "seeds": 3,
        "steps": 40,
        "short": False,
        "arms": None,
        "first_seed": 0,
        "seed_list": [0, 1, 2],
    }
    assert parse_args(["--out", "x", "--first-seed", "1", "--seeds", "2"], name, None, 3, 40).seed_list == [1, 2]
    with pytest.raises(SystemExit) as e:
        parse_args(["--out", "x", "--first-seed", "-1"], name, None, 3, 40)
    assert e.value.code == 2 and "--first-seed=-1: must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        parse_args(["--out", "x", "--seeds", "0"], name, None, 3, 40)
    assert e.value.code == 2 and "--seeds=0: must be >= 1" in capsys.readouterr().err
    picked = parse_args(["--out", "x", "--arms", "b, a"], name, None, 3, 40, arm_names=["a", "b", "c"])
    assert picked.arms == ("b", "a")
    with pytest.raises(SystemExit) as e:
        parse_args(["--out", "x", "--arms", "a,typo"], name, None, 3, 40, arm_names=["a", "b"])
    assert e.value.code == 2 and "this experiment's arms: a, b" in capsys.readouterr().err
    tasks = {"toy": ("", "toy", ()), "real": ("smollm2.py", "real", ())}
    assert parse_args(["--out", "x"], name, None, 3, 40, tasks=tasks).task == "toy"
    assert parse_args(["--out", "x", "--task", "real"], name, None, 3, 40, tasks=tasks).task == "real"
    with pytest.raises(SystemExit) as e:  # --short's overrides size the toy task only
        parse_args(["--out", "x", "--task", "real", "--short"], name, None, 3, 40, tasks=tasks)
    assert e.value.code == 2 and "--short sizes the toy task's runs" in capsys.readouterr().err


def test_truncation_on_the_real_model_runs_configs_smollm2(tmp_path, monkeypatch):
    """--task smollm2: every arm is configs/smollm2.py:RULE scored before RL and at the last step,
    so its conditional_0.1 run is experiments.smollm2's `reads` run of the same seed."""
    from microcoder_jax.experiments import cli, smollm2, truncation

    seen = {}

    def fake_run_all(arms, seeds, steps, out, **_):
        seen["arms"] = arms
        raise SystemExit(0)

    monkeypatch.setattr(cli, "run_all", fake_run_all)
    with pytest.raises(SystemExit):
        truncation.main(
            ["--out", str(tmp_path), "--task", "smollm2", "--steps", "20", "--arms", "grpo,conditional_0.1"]
        )
    grpo, conditional = seen["arms"]
    reads = run_config(smollm2.arms(20)[0], 5, 20, False, str(tmp_path))
    for arm, rule in ((grpo, "none"), (conditional, "conditional")):
        config = run_config(arm, 5, 20, False, str(tmp_path))
        assert arm.config_file == "smollm2.py" and validate(config)["rl"].truncation == rule
        assert (config.train.eval_every, config.train.eval_at_start) == (20, True)
    same = dataclasses.replace(validate(reads)["rl"], soft_overlong_cache=40)
    assert validate(run_config(conditional, 5, 20, False, str(tmp_path)))["rl"] == same


@pytest.mark.parametrize("name", ["truncation", "temperature", "staleness", "lora", "pool_and_packing", "feedback"])
def test_every_arm_is_a_valid_config(name, tmp_path):
    """Each arm's overrides name real knobs with values the config accepts (a typo fails here,
    not an hour into an experiment)."""
    import importlib

    from microcoder_jax import config as config_lib

    for arm in importlib.import_module(f"microcoder_jax.experiments.{name}").ARMS:
        config_lib.validate(run_config(arm, 0, 40, False, str(tmp_path)))


# staleness: one arm per code path (k = 0, k = 1 with its thread, the paged engine, partial
# rollouts), not all eight; truncation: one arm per kind of rule (none, mask all, conditional), not
# all five: the others differ only in knob values
SHORT_ARMS = {
    "staleness": ("sync", "k1_tis", "paged_sync", "paged_partial"),
    "truncation": ("grpo", "overlong_filter", "conditional_0.3"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["truncation", "temperature", "staleness"])
def test_experiment_command_short(tmp_path, name, capsys):
    """--short end to end: every arm (or the --arms picked) trains a few steps, summary.json, table
    and figure written; the table and stdout say it is a check of the command, not a result."""
    import importlib

    module = importlib.import_module(f"microcoder_jax.experiments.{name}")
    out = str(tmp_path / name)
    picked = SHORT_ARMS.get(name)
    assert module.main(["--out", out, "--short", *(["--arms", ",".join(picked)] if picked else [])]) == 0  # one seed
    assert SHORT_NOTE in capsys.readouterr().out
    assert open(os.path.join(out, "table.md")).read().startswith(f"**{SHORT_NOTE}**")
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert list(summary["arms"]) == list(picked or [a.name for a in module.ARMS]) and summary["steps"] == 3
    for arm in summary["arms"].values():
        assert set(arm["seeds"]) == {"0"} and arm["seeds"]["0"]["temperature_path"]
        for part in ("start", "end"):  # held out: before RL and after the last step
            assert 0 <= arm["seeds"]["0"][part]["greedy_pass1"] <= 1 and 0 <= arm["seeds"]["0"][part]["pass8"] <= 1
    assert summary["start_length_curve"] and "paired" in summary
    assert os.path.getsize(os.path.join(out, "curves.png")) > 10_000
    if name == "staleness":  # every arm against the first, and the extra pairs whose both arms ran
        assert set(summary["paired"]) == {
            "k1_tis - sync",
            "paged_sync - sync",
            "paged_partial - sync",
            "paged_partial - paged_sync",
        }
    if name == "truncation":  # the rules differ where they should, on the same warm start
        arms = summary["arms"]
        assert (
            arms["overlong_filter"]["over_seeds"]["start_masked"]["mean"]
            == arms["overlong_filter"]["over_seeds"]["start_truncation"]["mean"]
            > 0
        )
        assert arms["grpo"]["over_seeds"]["start_masked"]["mean"] == 0


# The main effect on a shortened run (20 RL steps, seed 0): mean over steps 11-20 of overlong_filter
# minus grpo. Measured on seeds 0-5 (experiments.truncation, 40-step runs, their first 20 steps;
# the runs are deterministic and the evaluations do not touch training, so the first 20 steps of a
# 40-step run are a 20-step run without evaluations): length +3.84, +1.49, +3.67, +3.28, +3.63,
# +3.13 tokens (mean 3.17, std 0.79); truncation rate +0.125, +0.060, +0.111, +0.113, +0.120, +0.073
# (mean 0.100, std 0.025). Both held on every seed; the margins are the mean minus 3 standard
# deviations over those seeds.
DIRECTION_STEPS = 20
LENGTH_MARGIN = 3.17 - 3 * 0.79  # tokens
TRUNCATION_MARGIN = 0.100 - 3 * 0.025  # fraction of answers


@pytest.mark.slow
def test_overlong_filter_keeps_longer_and_more_truncated_answers_than_grpo(tmp_path):
    from microcoder_jax.experiments import truncation

    no_eval = ("train.eval_every=0", "train.eval_at_start=False")  # training is the same with or without
    arms = [
        dataclasses.replace(a, overrides=a.overrides + no_eval)
        for a in truncation.ARMS
        if a.name in ("grpo", "overlong_filter")
    ]
    results = run_all(arms, [0], DIRECTION_STEPS, str(tmp_path), log=lambda m: None)
    late = {}
    for arm in arms:
        rows = training_rows(results[arm.name][0][0])[DIRECTION_STEPS // 2 :]
        late[arm.name] = {k: float(np.mean(series(rows, k))) for k in ("response_length_mean", "truncation_rate")}
    gap = {k: late["overlong_filter"][k] - late["grpo"][k] for k in late["grpo"]}
    assert gap["response_length_mean"] > LENGTH_MARGIN, (late, gap)
    assert gap["truncation_rate"] > TRUNCATION_MARGIN, (late, gap)


def test_paired_differences_count_seeds_and_give_a_t_interval():
    """Arms are compared seed by seed with the first arm: the count of seeds each way and a 95%
    Student-t interval of the mean difference (scipy's t quantile, df = seeds - 1)."""

    def arm_seeds(ends):
        return {str(s): {"end": {"length": v}, "start": {"length": 0.0}} for s, v in enumerate(ends)}

    summary = {
        "arms": {
            "grpo": {"seeds": arm_seeds([30.0, 32.0, 31.0, 29.0])},
            "filter": {"seeds": arm_seeds([33.0, 33.0, 35.0, 29.0])},
        }
    }
    r = paired(summary, "filter", "grpo", "length")
    assert (r["seeds"], r["positive"], r["negative"]) == (4, 3, 0) and r["mean"] == 2.0
    d = np.array([3.0, 1.0, 4.0, 0.0])
    half = 3.182446305284263 * d.std(ddof=1) / 2  # t(0.975, 3) x sd / sqrt(4)
    assert r["ci95"] == pytest.approx([2.0 - half, 2.0 + half])
    assert paired(summary, "grpo", "grpo", "length")["ci95"] == [0.0, 0.0]
    one = {"arms": {k: {"seeds": {"0": v["seeds"]["0"]}} for k, v in summary["arms"].items()}}
    assert paired(one, "filter", "grpo", "length")["ci95"] is None
    text = paired_table(summary, ("length",))
    assert "| filter - grpo | +2 [" in text and ">0 in 3/4, <0 in 0" in text


def test_feedback_experiment_summary_pairs_seeds_and_reads_the_turns():
    """The multi-turn experiment's summary from held-out reports (no training here: --short runs
    the command, the arms' configs are checked above): per seed before and after RL, the turn-2
    minus turn-1 gap's change paired over seeds, the table."""
    from microcoder_jax.experiments import feedback

    def report(p1, t1=None, t2=None):
        r = {"overall": {"pass@1": p1}}
        if t1 is not None:
            r["episodes"] = {"pass_turn1": t1, "pass_turn2": t2, "repaired_frac": 0.1, "problems": 20}
        return r

    results = {
        "single": {s: ([], {}, {0: report(0.2), 40: report(0.3 + s / 10)}) for s in range(3)},
        "feedback": {s: ([], {}, {0: report(0.2, 0.2, 0.25), 40: report(0.3, 0.3, 0.5 + s / 10)}) for s in range(3)},
    }
    summary = feedback.summarize(results, 40)
    assert summary["arms"]["feedback"]["1"]["end"]["episode_pass_turn2"] == 0.6
    gap = summary["feedback_gap_change"]  # (0.5 + s/10 - 0.3) - 0.05 per seed
    assert gap["seeds"] == 3 and gap["positive"] == 3 and abs(gap["mean"] - 0.25) < 1e-9
    assert gap["ci95"][0] < gap["mean"] < gap["ci95"][1]
    assert abs(summary["turn2_minus_single"]["mean"] - 0.2) < 1e-9  # 0.5 + s/10 - (0.3 + s/10)
    text = feedback.table(summary)
    assert "| feedback | 2 | 0.200 | 0.300 | 0.200 | 0.250 | 0.300 | 0.700 | 0.100 | - |" in text
    assert "| single | 0 | 0.200 | 0.300 | - |" in text
    # training repairs (sampled episodes), first and last 10 steps, paired over seeds
    steps = lambda s: [{"reward_mean": 0.1, "episode_repaired_frac": 0.2 + s / 10 + i / 100} for i in range(30)]  # noqa: E731
    trained = {**results, "feedback": {s: (steps(s), {}, v[2]) for s, v in results["feedback"].items()}}
    summary = feedback.summarize(trained, 40)
    assert summary["arms"]["feedback"]["1"]["train"] == pytest.approx({"repaired_first": 0.345, "repaired_last": 0.545})
    change = summary["train_repaired_change"]
    assert (
        change["positive"] == 3
        and change["mean"] == pytest.approx(0.2)
        and "train" not in summary["arms"]["single"]["0"]
    )
    assert "| 0.345 -> 0.545 |" in feedback.table(
        summary
    ) and "training repairs, last 10 steps minus first 10 (feedback): +0.200" in feedback.table(summary)
    # the copy task's pair (constants: the feedback shows the answer) is summarised under its own keys
    both = feedback.summarize({**results, "copy-single": results["single"], "copy": results["feedback"]}, 40)
    assert both["copy_turn2_minus_single"] == summary["turn2_minus_single"]
    assert both["copy_feedback_gap_change"] == gap
    assert "copy's turn-2 pass@1 minus copy-single's" in feedback.table(both)


def test_feedback_experiment_figure_draws_turns_and_repairs(tmp_path):
    """curves.png from the runs' metrics rows: held-out panels from the evaluations, training
    panels from the steps; an arm of one answer (no episode keys) is simply absent there."""
    from microcoder_jax.experiments import feedback, figure

    def rows(seed, episodes):
        out = []
        for step in range(0, 21):
            r = {"step": step, "reward_mean": 0.2 + step / 100, "truncation_rate": 0.05}
            if episodes:
                r["episode_repaired_frac"] = 0.2 + seed / 10 + step / 50
            out.append(r)
            if step % 10 == 0:
                e = {"step": step, "eval_pass@1": 0.2}
                if episodes:
                    e |= {f"eval_episode_{k}": 0.3 for k in ("pass_turn2", "repaired_frac", "repeat_frac")}
                out.append(e)
        return out

    arms = [a for a in feedback.ARMS if a.name in ("copy-single", "copy-reads-strong")]
    results = {a.name: {s: (rows(s, a.name != "copy-single"), {}, {}) for s in range(2)} for a in arms}
    path = str(tmp_path / "curves.png")
    figure.draw(results, arms, path, keys=feedback.CURVES, title=feedback.TITLE.format(seeds="2 seeds"))
    assert os.path.getsize(path) > 10_000 and all(k in figure.PANELS for k in feedback.CURVES)


def test_real_model_experiment_summary_intervals_and_arms():
    """experiments/smollm2.py from finished runs (no training): per seed start/end held-out pass@1
    and greedy, the training pass rate of the last 5 steps and the tokens sampled, RL's change per
    arm and the arms' paired difference; each arm's config is configs/smollm2.py with its reward,
    scored at start and end; the feedback arm (two turns) scored at its end only, its episodes'
    pass@1 by turn reported, in fewer steps (about the single-turn arms' sampled tokens)."""
    from microcoder_jax.experiments import smollm2

    def report(p, g, turns=None):
        out = {"overall": {"pass@1": p}, "greedy": {"overall": {"pass@1": g}}}
        if turns:
            out["episodes"] = {"pass_turn1": turns[0], "pass_turn2": turns[1], "repaired_frac": turns[2]}
        return out

    def run(ends, passing, start=True, steps=6):
        rows = [
            {"step": i + 1, "pass_rate": passing, "reward_mean": 0.1, "response_length_mean": 12.5, "rows": 8}
            for i in range(steps)
        ]
        if not start:  # two turns: the span holds a feedback turn, which the model did not sample
            rows = [dict(r, response_length_mean=17.5, episode_feedback_tokens_mean=5.0) for r in rows]
        reports = {0: report(0.0, 0.0), 10: report(0.5, 0.5), 20: report(*ends)}
        return rows, {}, reports if start else {7: report(*ends)}

    results = {
        "reads": {0: run((0.05, 0.125), 0.1), 1: run((0.0, 0.1875), 0.2), 2: run((0.10, 0.25), 0.3)},
        "runs": {0: run((0.0, 0.0), 0.0), 1: run((0.0, 0.0625), 0.0), 2: run((0.0, 0.0), 0.0)},
        "lora": {0: run((0.0, 0.0625), 0.1), 1: run((0.0, 0.0), 0.0)},  # two seeds: paired over those
        "feedback": {s: run((0.0, 0.0625 * s, (0.0, 0.25, 0.25)), 0.1, start=False, steps=3) for s in range(3)},
    }
    s = smollm2.summarize(results, 20)
    two = s["arms"]["reads"]["2"]
    assert two["start"]["pass@1"] == 0.0 and two["start"]["greedy pass@1"] == 0.0
    assert two["end"]["pass@1"] == 0.10 and two["end"]["greedy pass@1"] == 0.25  # the last evaluation, not step 10's
    assert two["train_pass_last5"] == pytest.approx(0.3) and two["steps"] == 6 and two["sampled_tokens"] == 600
    assert np.isnan(two["end"]["episodes pass@1, turn 2"])  # single turn: no episodes
    change = s["change"]["reads"]["greedy pass@1"]
    assert change["mean"] == pytest.approx(0.1875) and change["positive"] == 3 and change["ci95"][0] > 0
    diff = s["difference"]["runs - reads"]["pass@1"]
    assert diff["mean"] == pytest.approx(-0.05) and diff["positive"] == 0
    lora = s["difference"]["lora - reads"]["greedy pass@1"]
    assert lora["seeds"] == 2 and lora["mean"] == pytest.approx(((0.0625 - 0.125) + (0.0 - 0.1875)) / 2)
    fb = s["arms"]["feedback"]["1"]
    assert fb["start"] is None and fb["steps"] == 3 and fb["sampled_tokens"] == 300
    assert fb["end"]["episodes pass@1, turn 2"] == 0.25 and fb["end"]["repaired"] == 0.25
    assert "feedback" not in s["change"]  # no start: RL's change is not claimed
    fd = s["difference"]["feedback - reads"]["greedy pass@1"]
    assert fd["seeds"] == 3 and fd["mean"] == pytest.approx((0.0625 * 3 - (0.125 + 0.1875 + 0.25)) / 3)
    text = smollm2.table(s)
    assert "| reads | 2 | 0.000 | 0.100 | 0.000 | 0.250 | - | 0.300 | 6 | 600 |" in text
    assert "| feedback | 2 | - | 0.000 | - | 0.125 | 0.000 -> 0.250 | 0.100 | 3 | 300 |" in text
    assert "reads: RL's change in held-out greedy pass@1: +0.188 [" in text
    for arm in smollm2.arms(20):
        config = run_config(arm, 1, 20, False, "/tmp/unused")
        assert config.judge.reward == smollm2.REWARDS.get(arm.name, "fraction_reads") and config.seed == 1
        assert config.lora.rank == (16 if arm.name == "lora" else 0)
        assert config.rl.learning_rate == (1e-4 if arm.name == "lora" else 1e-5)
        assert config.model.path == "smollm2" and config.temperature.temperature == 0.7
        multi = arm.name == "feedback"
        assert config.env.kind == ("feedback" if multi else "code") and (config.env.max_turns == 2 or not multi)
        assert config.train.steps == (7 if multi else 20)
        assert config.train.eval_at_start == (not multi) and config.train.eval_every == config.train.steps
        validate(config)
    assert smollm2.main(["--out", "/tmp/unused", "--short"]) == 2  # the demo's --short does not size these runs
