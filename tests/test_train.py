"""End to end: the shortened demo learns with the real judge, without steady-state recompiles;
eval and plot read its workdir (non-finite updates: tests/test_train_faults.py)."""

import json
import os

import jax
import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.trainer import evaluation as eval_lib
from microcoder_jax.trainer import plot
from microcoder_jax.trainer import loop as train
from microcoder_jax.models.checkpoint import Checkpointer
from microcoder_jax.trainer.metrics import read_metrics

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
pytestmark = pytest.mark.slow  # one shortened demo run (~1-2 min on 2 idle cores) shared by the module


def short_demo(**overrides):
    """The demo, shortened: fewer RL steps (the full demo runs 50)."""
    c = config_lib.demo_config()
    c.train.steps = 30
    c.train.progress = False
    c.train.checkpoint_every = 0  # only the final checkpoint
    for key, value in overrides.items():
        group, name = key.split(".")
        c[group][name] = value
    return c


EVENTS: list = []  # the demo run's order of "score" (learner) and "judged" (verdicts waited for)


def _recorded(name, fn):
    def wrapper(*args, **kwargs):
        EVENTS.append(name)
        return fn(*args, **kwargs)

    return wrapper


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One shortened demo run; counts XLA compilations per step and records when the learner
    scored each batch against when its verdicts were waited for (EVENTS)."""
    from microcoder_jax.trainer import step_batch
    from microcoder_jax.trainer.learner import Learner

    workdir = str(tmp_path_factory.mktemp("demo"))
    compiles, per_step = [0], {}
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, *a, **k: compiles.__setitem__(0, compiles[0] + (event == COMPILE_EVENT))
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Learner, "score", _recorded("score", Learner.score))
        patch.setattr(step_batch, "finish", _recorded("judged", step_batch.finish))
        train.train(
            short_demo(),
            workdir,
            log_fn=lambda *a: None,
            on_step=lambda step, record: per_step.__setitem__(step, compiles[0]),
        )
    return workdir, per_step


def test_old_logprobs_are_dispatched_before_the_verdicts_are_waited_for(demo_run):
    """One data path: the worker hands the loop each batch once sampled, the learner scores its
    rows (once) and only then are the verdicts waited for, so the device works while the pool judges."""
    assert EVENTS == ["score", "judged"] * 30


def test_demo_learns(demo_run):
    workdir, _ = demo_run
    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    assert [r["step"] for r in rows] == list(range(1, 31))
    rewards = np.array([r["reward_mean"] for r in rows])
    first, last = rewards[:10].mean(), rewards[-10:].mean()
    assert first > 0.05, f"the warm start should pass sometimes (first 10 steps: {first:.3f})"
    assert last >= 1.6 * first, f"reward did not climb: first 10 {first:.3f}, last 10 {last:.3f}"


def test_required_metrics_are_logged(demo_run):
    workdir, _ = demo_run
    row = read_metrics(os.path.join(workdir, "metrics.jsonl"))[-1]
    required = [
        "step",
        "reward_mean",
        "pass_rate",
        "response_length_mean",
        "truncation_rate",
        "masked_fraction",
        "repetition_rate",
        "diversity",
        "temperature",
        "entropy",
        "clip_fraction",
        "grad_norm",
        "learning_rate",
        "time_sample_s",
        "time_judge_s",
        "time_train_s",
    ]
    missing = [k for k in required if not isinstance(row.get(k), (int, float))]
    assert not missing, missing
    assert row["temperature"] == 1.0 and 0 <= row["pass_rate"] <= 1


def test_no_recompilation_in_steady_state(demo_run):
    _, per_step = demo_run
    # Step 1 compiles the sampler, log-probs and the train step; nothing compiles after step 2.
    assert per_step[30] - per_step[2] == 0, {s: per_step[s] - per_step[2] for s in (3, 10, 30)}


def test_final_checkpoint_holds_everything_to_resume(demo_run):
    workdir, _ = demo_run
    ck = Checkpointer(os.path.join(workdir, "checkpoints"))
    assert ck.latest_step() == 30
    meta = ck.read_meta()
    assert meta["step"] == 30 and "next_index" in meta["data"] and meta["scheduler"]["temperature"] == 1.0
    ck.close()


def test_eval_cli_and_plot_on_the_run(demo_run, tmp_path, capsys):
    workdir, _ = demo_run
    out = str(tmp_path / "eval.json")
    assert (
        eval_lib.main(
            [
                "--checkpoint",
                workdir,
                "--out",
                out,
                "--config.eval.samples=2",
                "--config.eval.temperature=1.0",
                "--config.eval.greedy=True",
                "--config.demo.held_out_per_op=3",
            ]
        )
        == 0
    )
    report = json.load(open(out))
    assert report["step"] == 30 and report["samples_per_problem"] == 2 and report["temperature"] == 1.0
    assert set(report["overall"]) == {"problems", "pass@1", "pass@2"}
    assert report["overall"]["problems"] == 15 and "demo" in report["by_platform"]  # 5 ops x 3 held out
    assert all(q.startswith("demo-heldout-") for q in report["per_problem"])
    finished = (30 - report["judge_errors"]) * (1 - report["lengths"]["truncated"])  # by_length: finished answers
    assert sum(b["answers"] for b in report["lengths"]["by_length"]) == pytest.approx(finished)
    greedy = report["greedy"]["overall"]
    assert greedy["problems"] == 15 and 0 <= greedy["pass@1"] <= 1 and "pass@2" not in greedy
    printed = capsys.readouterr().out
    assert "overall" in printed and "greedy (T = 0) pass@1" in printed
    assert os.path.exists(plot.plot_run(workdir)[-1])


def test_demo_steps_with_truncated_importance_sampling(tmp_path):
    """rl.is_correction=tis on the demo: the sampler's log-probs reach the step, which logs the
    weights; the float32 demo's sampler is the training forward to rounding, so weights are ~1."""
    c = short_demo(**{"train.steps": 3, "train.warm_start_steps": 0, "rl.is_correction": "tis"})
    train.train(c, str(tmp_path), log_fn=lambda *a: None)
    rows = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert np.isfinite(r["loss"]) and r["is_masked_frac"] == 0.0 and r["is_truncated_frac"] == 0.0
        assert abs(r["is_weight_mean"] - 1) < 1e-4 and abs(r["is_weight_max"] - 1) < 1e-2, r
        assert 0 <= r["is_gap"] < 1e-4 and abs(r["is_gap"] - r["sampler_logprob_gap"]) < 1e-5


def test_unknown_config_key_names_the_closest_ones_not_every_key(capsys):
    assert train.main(["--config.train.stepz=3"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'train.stepz' (did you mean train.steps?)" in err and "--help" in err
    assert "rl.rho" not in err and len(err) < 400, err  # a hint, not a wall of every key
    assert train.main(["--config.train.zzzzzz=3"]) == 2  # no close spelling: keys of its block
    err = capsys.readouterr().err
    assert "close keys: train." in err and "rl." not in err and len(err) < 400, err


@pytest.mark.parametrize(
    "override, message", [("rl.rho=abc", "rl.rho"), ("temperature.policy=bogus", "policy"), ("rl.rho=2.0", "rho")]
)
def test_bad_value_is_one_error_line_and_nothing_is_written(tmp_path, capsys, override, message):
    workdir = tmp_path / "run"
    assert train.main([f"--config.{override}", f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not workdir.exists()


def test_kv_heads_that_do_not_split_over_the_sampler_mesh_are_refused_before_writing(tmp_path, capsys):
    workdir = tmp_path / "run"  # the demo's 2 KV heads cannot split over 4 of the 8 (fake) devices
    assert (
        train.main(
            [
                "--config.mesh.fsdp=-1",
                "--config.sampling.engine=paged",
                "--config.sampling.decode_tensor=4",
                f"--workdir={workdir}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: sampling.decode_tensor=4") and "use -1" in err[0], err
    assert not workdir.exists()


def test_help_lists_every_config_key_with_its_default(capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for key in config_lib.flat_keys(config_lib.demo_config()):
        assert f"--config.{key}=" in out, key
    assert "--config.train.steps=50  RL steps" in out and "--workdir" in out
    lines = out.splitlines()  # one usage line, the synopsis, not the prog name and then the synopsis
    assert lines[0].startswith("usage: python -m microcoder_jax.train [--config=") and "`" not in lines[0]
    assert sum(ln.startswith("usage:") or ln.startswith("`python -m") for ln in lines) == 1
