"""Plots a researcher can trust: units on the axes, raw and smoothed curves named as such, the
compile step out of the time panel, small fractions on their own axes, eval and warm-start
panels, the run name in the title, and no panel for a quantity that never changed."""

import json
import os

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from microcoder_jax.trainer import plot  # noqa: E402


@pytest.fixture
def run_dir(tmp_path):
    workdir = tmp_path / "my-run"
    workdir.mkdir()
    with open(workdir / "metrics.jsonl", "w") as f:
        for step in range(1, 21):
            row = {
                "step": step,
                "reward_mean": step / 40,
                "pass_rate": step / 50,
                "temperature": 1.0,
                "clip_fraction": 0.001 * step,
                "grad_norm": 30.0 / step,
                "time_step_s": 60.0 if step == 1 else 2.0 + step % 3,
                "learning_rate": 7e-4,
            }
            if step % 10 == 0:
                row["eval_pass@1"] = step / 100
            f.write(json.dumps(row) + "\n")
    with open(workdir / plot.WARM_START_FILE, "w") as f:
        for step in range(1, 51):
            f.write(json.dumps({"step": step, "loss": 5.0 / step}) + "\n")
    return str(workdir)


def _panels(run_dir):
    from microcoder_jax.trainer.metrics import read_metrics

    return plot.collect_panels(read_metrics(os.path.join(run_dir, "metrics.jsonl")), plot.read_warm_start(run_dir))


def test_constants_get_no_panel_and_are_listed(run_dir):
    panels, constants = _panels(run_dir)
    names = [p[0] for p in panels]
    assert "temperature" not in names and "learning_rate" not in names
    assert constants == {"temperature": 1.0, "learning_rate": 7e-4}
    assert {"reward", "eval", "warm_start", "clip", "grad_norm", "time"} <= set(names)


def test_time_panel_leaves_out_the_compile_step(run_dir):
    panels, _ = _panels(run_dir)
    x, y = dict((p[0], p[3]) for p in panels)["time"]["time_step_s"]
    assert x[0] == 2 and max(y) < 60


def test_clip_fraction_has_its_own_axis(run_dir):
    panels, _ = _panels(run_dir)
    assert [list(p[3]) for p in panels if "clip_fraction" in p[3]] == [["clip_fraction"]]


def test_every_axis_is_labelled_and_the_legend_says_raw_or_smoothed(run_dir):
    panels, constants = _panels(run_dir)
    fig = plot.overview_figure(panels, constants, "my-run: 20 RL steps", window=5)
    assert fig._suptitle.get_text().startswith("my-run: 20 RL steps") and "temperature = 1" in fig._suptitle.get_text()
    used = [ax for ax in fig.axes if ax.has_data()]
    assert len(used) == len(panels)
    for ax in used:
        assert ax.get_ylabel() and ax.get_xlabel() in ("RL step", "warm-start step")
    labels = {ax.get_title(): [t.get_text() for t in ax.get_legend().get_texts()] for ax in used}
    assert labels["training reward and pass rate"] == [
        "reward_mean (raw)",
        "reward_mean (mean of 5 steps)",
        "pass_rate (raw)",
        "pass_rate (mean of 5 steps)",
    ]
    assert labels["evaluation pass@1"] == ["eval_pass@1"]  # sparse points: not smoothed


def test_plot_run_writes_pngs_and_cli_reports_a_bad_workdir(run_dir, tmp_path, capsys):
    paths = plot.plot_run(run_dir)
    assert os.path.basename(paths[-1]) == "overview.png" and all(os.path.getsize(p) > 1000 for p in paths)
    assert "warm_start.png" in map(os.path.basename, paths)
    with pytest.raises(SystemExit) as e:
        plot.main(["--workdir", str(tmp_path / "empty")])
    assert e.value.code == 1 and "no such folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda p: None, "no such folder; pass the --workdir of a training run"),
        (lambda p: os.makedirs(p), "the folder has no metrics.jsonl; pass the --workdir of a training run"),
        (lambda p: os.makedirs(p) or open(os.path.join(p, "metrics.jsonl"), "w").close(), "has no rows yet"),
    ],
    ids=["missing", "no-metrics", "no-rows"],
)
def test_a_workdir_without_metrics_is_one_line_with_the_fix(tmp_path, capsys, make, says):
    """`plot --workdir runs/nope`: exit 1 and one line saying what is missing and what to pass."""
    workdir = str(tmp_path / "nope")
    make(workdir)
    with pytest.raises(SystemExit) as e:
        plot.main(["--workdir", workdir])
    err = capsys.readouterr().err
    assert e.value.code == 1 and err.count("\n") == 1 and err.startswith("plot: error: ") and says in err, err


def test_moving_mean_and_window():
    assert plot.moving_mean([1, 3, 5, 7], 2) == [1, 2, 4, 6]
    assert plot.auto_window(50) == 5 and plot.auto_window(3) == 1


def test_identical_series_are_drawn_once_under_both_names():
    rows = [{"step": s, "reward_mean": s / 10, "pass_rate": s / 10} for s in range(1, 6)]
    panels, _ = plot.collect_panels(rows, [])
    assert list(panels[0][3]) == ["reward_mean = pass_rate"]


def test_multi_turn_episodes_get_panels_with_every_turn_in_order():
    rows = [
        {"step": s, **{f"episode_pass_turn{t}": t * s / 100 for t in (1, 2, 10)}, "episode_turns_mean": 1 + s / 10}
        for s in range(1, 6)
    ]
    rows += [{"step": 5, "eval_episode_pass_turn1": 0.2, "eval_episode_pass_turn2": 0.3}]
    panels = {name: curves for name, _, _, curves in plot.collect_panels(rows, [])[0]}
    assert list(panels["episodes"]) == ["episode_pass_turn1", "episode_pass_turn2", "episode_pass_turn10"]
    assert list(panels["eval_episodes"]) == ["eval_episode_pass_turn1", "eval_episode_pass_turn2"]
    assert list(panels["turns"]) == ["episode_turns_mean"]
