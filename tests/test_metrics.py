"""metrics.jsonl / TensorBoard writing, resume truncation, and the plots."""
import math
import os

import numpy as np

from microcoder_jax.trainer import plot
from microcoder_jax.trainer.metrics import MetricsWriter, progress_postfix, read_metrics


def _row(step):
    return {"reward_mean": 0.1 * step, "pass_rate": np.float32(0.05 * step), "temperature": 1.0,
            "response_length_mean": 20 + step, "grad_norm": np.float64(1.5), "time_sample_s": 0.2,
            "entropy": 0.5, "diversity": 0.7, "learning_rate": 1e-3}


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
