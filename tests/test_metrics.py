"""metrics.jsonl / TensorBoard writing, resume truncation, and the plots."""

import math
import os
import unittest.mock

import numpy as np

from microcoder_jax.trainer import plot
from microcoder_jax.trainer.metrics import MetricsWriter, progress_postfix, read_metrics


def _row(step):
    return {
        "reward_mean": 0.1 * step,
        "pass_rate": np.float32(0.05 * step),
        "temperature": 1.0,
        "response_length_mean": 20 + step,
        "grad_norm": np.float64(1.5),
        "time_sample_s": 0.2,
        "entropy": 0.5,
        "diversity": 0.7,
        "learning_rate": 1e-3,
    }


def test_rows_are_plain_json_with_step(tmp_path):
    w = MetricsWriter(str(tmp_path))
    for s in (1, 2):
        w.write(s, _row(s))
    w.write(3, {"loss": float("nan"), "reward_mean": 0.0})
    w.close()
    rows = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert isinstance(rows[1]["pass_rate"], float) and math.isclose(rows[1]["pass_rate"], 0.1, rel_tol=1e-6)
    assert rows[2]["loss"] == "nan"  # still valid JSON
    assert os.listdir(tmp_path / "tensorboard")


def test_resume_drops_rows_after_the_checkpoint_and_torn_lines(tmp_path):
    w = MetricsWriter(str(tmp_path))
    for s in (1, 2, 3, 4):
        w.write(s, _row(s))
    w.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "rew')  # a line torn by SIGKILL
    w = MetricsWriter(str(tmp_path), resume_step=2, tensorboard=False)
    w.write(3, _row(3))
    w.close()
    assert [r["step"] for r in read_metrics(str(tmp_path / "metrics.jsonl"))] == [1, 2, 3]
    w = MetricsWriter(str(tmp_path), tensorboard=False)  # a fresh run starts a fresh file
    w.close()
    assert read_metrics(str(tmp_path / "metrics.jsonl")) == []


def test_progress_postfix():
    post = progress_postfix({"reward_mean": 0.25, "pass_rate": 0.125, "temperature": 1.2, "x": 3})
    assert post == {"reward": "0.25", "pass": "0.125", "T": "1.2"}


def test_plot_writes_pngs(tmp_path):
    w = MetricsWriter(str(tmp_path), tensorboard=False)
    for s in range(1, 6):
        w.write(s, _row(s))
    w.close()
    paths = plot.plot_run(str(tmp_path))
    names = {os.path.basename(p) for p in paths}
    assert {"reward.png", "length.png", "overview.png"} <= names and "temperature.png" not in names  # constant
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    plot.main(["--workdir", str(tmp_path), "--out", str(tmp_path / "p2")])
    assert os.path.exists(tmp_path / "p2" / "overview.png")


class _Rollout:
    """The fields `throughput` reads: 2 prompts x G=3; prompt 0 solved by one response."""

    response_lengths = np.array([10, 20, 30, 5, 5, 5])
    response_mask = (np.arange(50)[None] < response_lengths[:, None]).astype(np.int32)
    attention_mask = np.ones((6, 50), np.int32)
    passed = np.array([False, True, False, False, False, False])


def test_throughput_rates_shares_and_chip_seconds():
    from microcoder_jax.trainer.metrics import throughput

    times = {"sample": 2.0, "judge": 0.5, "train": 1.0}
    out = throughput(_Rollout(), times, time_step=4.0, group_size=3, devices=8, programs=6, tests=30, generations=1)
    assert out["gen_tokens"] == 75 and out["train_tokens"] == 300
    assert out["throughput/gen_tokens_per_s"] == 37.5 and out["throughput/train_tokens_per_s"] == 300
    assert out["throughput/judge_programs_per_s"] == 12 and out["throughput/judge_tests_per_s"] == 60
    shares = (out["share/sample"], out["share/judge"], out["share/train"], out["share/other"])
    assert shares == (0.5, 0.125, 0.25, 0.125)
    assert out["cost/chip_s"] == 32 and out["solved_problems"] == 1 and out["passing_responses"] == 1
    assert out["cost/chip_s_per_solved_problem"] == 32 and out["cost/chip_s_per_passing_response"] == 32
    dapo = throughput(
        _Rollout(), times, time_step=4.0, group_size=3, devices=1, programs=12, tests=None, generations=2
    )  # refills: the sampler made 12 responses of ~12.5 tokens
    assert dapo["gen_tokens"] == 150 and dapo["throughput/judge_tests_per_s"] is None
    # two-turn episodes: an answer, a 12-token feedback turn (not the model's), a second answer; the
    # span covers all three, the tokens sampled are the answers only
    mask = _Rollout.response_mask.copy()
    mask[1:3, 3:15] = 0  # rows 1 and 2 (20 and 30 tokens long) had a second turn
    episodes = type("E", (_Rollout,), {"response_mask": mask})()
    two = throughput(episodes, times, time_step=4.0, group_size=3, devices=1, programs=6, tests=30, generations=1)
    assert two["gen_tokens"] == 75 - 2 * 12
    unsolved = type("R", (_Rollout,), {"passed": np.zeros(6, bool)})()
    none = throughput(unsolved, times, time_step=4.0, group_size=3, devices=1, programs=6, tests=0, generations=1)
    assert none["cost/chip_s_per_solved_problem"] is None and none["cost/chip_s_per_passing_response"] is None


def test_judge_counter_counts_the_tests_each_program_ran_once():
    from microcoder_jax.judge.program import JudgeResult
    from microcoder_jax.trainer.metrics import JudgeCounter, tests_run

    results = [
        JudgeResult(True, "passed", 5, 5),
        JudgeResult(False, "wrong_answer", 1, 5, 1),
        JudgeResult(False, "no_code", 0, 5, 0),
        JudgeResult(False, "compile_error", 0, 5, 0),
    ]
    assert [tests_run(r, False) for r in results] == [5, 2, 0, 1]
    assert [tests_run(r, True) for r in results] == [5, 5, 0, 1]

    class Handle:
        def result(self):
            return results

        def done(self):
            return True

    class Pool:
        closed = False

        def submit(self, problems, codes, every_test=False, show_output=0):
            return Handle()

        def close(self):
            Pool.closed = True

    counter = JudgeCounter(Pool())
    handle = counter.submit([None] * 4, ["x"] * 4)
    assert handle.done() and handle.result() == results and handle.result() == results  # counted once
    assert counter.take() == 8 and counter.take() == 0
    counter.close()
    assert Pool.closed


def test_plot_draws_throughput_share_and_cost_without_step_one(tmp_path):
    w = MetricsWriter(str(tmp_path), tensorboard=False)
    for s in range(1, 8):
        w.write(
            s,
            {
                **_row(s),
                "throughput/gen_tokens_per_s": 1e3 * s,
                "throughput/train_tokens_per_s": 5e2 * s,
                "throughput/judge_programs_per_s": 10.0 + s,
                "throughput/judge_tests_per_s": 40.0 + s,
                "share/sample": 0.5 - s / 100,
                "share/judge": 0.1,
                "share/train": 0.3 + s / 100,
                "share/other": 0.1,
                "cost/chip_s_per_solved_problem": None if s == 3 else 9.0 / s,
                "cost/chip_s_per_passing_response": 3.0 / s,
            },
        )
    w.close()
    panels, constants = plot.collect_panels(read_metrics(str(tmp_path / "metrics.jsonl")), [])
    by_name = {name: (ylabel, curves) for name, _, ylabel, curves in panels}
    ylabel, curves = by_name["throughput_tokens"]
    assert "tokens per second" in ylabel and curves["throughput/gen_tokens_per_s"][0] == [2, 3, 4, 5, 6, 7]
    assert set(by_name["share"][1]) == {"share/sample", "share/train"} and constants["share/judge"] == 0.1
    assert by_name["cost"][1]["cost/chip_s_per_solved_problem"][0] == [2, 4, 5, 6, 7]  # None: no point
    assert "chip-seconds" in by_name["cost"][0] and "throughput_judge" in by_name
    names = {os.path.basename(p) for p in plot.plot_run(str(tmp_path))}
    assert {"throughput_tokens.png", "throughput_judge.png", "share.png", "cost.png"} <= names


class _Extra:
    """A stand-in for the W&B writer: what it was sent."""

    def __init__(self):
        self.steps, self.texts = [], []

    def write(self, step, record):
        self.steps.append(step)

    def write_text(self, step, tag, text):
        self.texts.append(step)

    def close(self):
        pass


def test_a_resume_sends_extra_only_steps_it_has_not_logged(tmp_path):
    """Killed after logging step 4, resumed from checkpoint 2: metrics.jsonl and TensorBoard get
    steps 3 and 4 again (once each); W&B, which keeps only increasing steps, gets 5 on."""
    first = _Extra()
    w = MetricsWriter(str(tmp_path), tensorboard=False, extra=first)
    w.write_text(0, "temperature", "probe")
    for s in (1, 2, 3, 4):
        w.write(s, _row(s))
    assert first.steps == [1, 2, 3, 4] and first.texts == [0]
    again = _Extra()
    w = MetricsWriter(str(tmp_path), resume_step=2, tensorboard=False, extra=again)
    for s in (3, 4, 5):
        w.write(s, _row(s))
        w.write_text(s, "temperature", "t")
    w.close()
    assert again.steps == [5] and again.texts == [5]
    assert [r["step"] for r in read_metrics(str(tmp_path / "metrics.jsonl"))] == [1, 2, 3, 4, 5]
    assert not os.path.exists(str(tmp_path / "metrics.jsonl.tmp"))


def test_tensorboard_purges_the_rerun_steps(tmp_path):
    """TensorBoard's purge_step: a resume from 2 hides the first process's steps 3-4, a fresh
    start in the workdir hides all of them, so no step shows twice."""
    from tensorboardX import SummaryWriter

    seen = {}
    real = SummaryWriter.__init__

    def spy(self, *args, purge_step=None, **kwargs):
        seen["purge_step"] = purge_step
        real(self, *args, purge_step=purge_step, **kwargs)

    with unittest.mock.patch.object(SummaryWriter, "__init__", spy):
        MetricsWriter(str(tmp_path), resume_step=2).close()
        assert seen["purge_step"] == 3
        MetricsWriter(str(tmp_path)).close()
        assert seen["purge_step"] == 0
