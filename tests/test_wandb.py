"""W&B: an offline run read back holds every metric at its step and the full config; a resumed
run continues the same run id; a bad `wandb.*` value is one error line; off means never imported."""

import glob
import json
import os
import struct
import subprocess
import sys
import time

import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.config import validate
from microcoder_jax.trainer import loop
from microcoder_jax.trainer.metrics import MetricsWriter
from microcoder_jax.trainer.wandb_writer import RUN_ID_FILE, open_writer

BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of (crc, length, type) records


def read_wandb_records(path):
    """Every Record protobuf of an offline run's run-ID.wandb file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B", "not a W&B run file"
    records, pos, part = [], 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        part += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(part)
            records.append(record)
            part = b""
    return records


def finished_records(run_dir, wait_s=120):
    """The records of a finished offline run (wandb's service may still be flushing after finish())."""
    (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    deadline = time.monotonic() + wait_s
    while True:
        records = read_wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def history_and_config(run_dir):
    """{step: {key: value}} and the config {key: value} of one offline run directory."""
    history, config = {}, {}
    for r in finished_records(run_dir):
        kind = r.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            history[items.pop("_step")] = items
        elif kind in ("run", "config"):  # the run record holds the config given to wandb.init
            updates = r.run.config.update if kind == "run" else r.config.update
            config.update({i.key: json.loads(i.value_json) for i in updates if i.key != "_wandb"})
    return history, config


def offline_config(tmp_path):
    c = config_lib.demo_config()
    c.wandb.mode, c.wandb.project, c.wandb.tags = "offline", "mc-test", ("demo", "ci")
    c.wandb.dir = str(tmp_path)
    return c


def test_offline_run_holds_metrics_and_config_and_a_resume_continues_its_id(tmp_path):
    pytest.importorskip("wandb")  # in the test extra: CI runs this
    workdir = str(tmp_path / "run")
    os.makedirs(workdir)
    c = offline_config(tmp_path)
    extra = open_writer(c, workdir, resume=False, extra_config={"rl_resolved": {"eps_high": 0.28}})
    writer = MetricsWriter(workdir, tensorboard=False, extra=extra)
    for step in (1, 2):
        writer.write(step, {"reward_mean": 0.25 * step, "div/distinct_4": 0.5, "note": "text", "flag": True})
    writer.write_text(2, "temperature", "1.0 -> 1.1 <because>")
    writer.close()
    run_id = open(os.path.join(workdir, RUN_ID_FILE)).read().strip()
    (first,) = glob.glob(str(tmp_path / "wandb" / f"offline-run-*-{run_id}"))
    history, config = history_and_config(first)
    assert history[1]["reward_mean"] == 0.25 and history[2]["reward_mean"] == 0.5
    assert history[2]["div/distinct_4"] == 0.5 and "note" not in history[1] and "flag" not in history[1]
    assert history[2]["temperature/_type"] == "html-file"  # the text event, as HTML
    assert config["rl"]["learning_rate"] == c.rl.learning_rate and config["rl_resolved"] == {"eps_high": 0.28}
    assert config["wandb"]["tags"] == ["demo", "ci"] and config["seed"] == 0 and config["data"]["task"] == "demo"

    writer = MetricsWriter(workdir, resume_step=2, tensorboard=False, extra=open_writer(c, workdir, resume=True))
    writer.write(3, {"reward_mean": 1.0})
    writer.close()
    assert open(os.path.join(workdir, RUN_ID_FILE)).read().strip() == run_id  # the same W&B run
    # W&B names a folder by its start second and adds "-1" when a resume starts in the same one
    runs = sorted(glob.glob(str(tmp_path / "wandb" / f"offline-run-*-{run_id}*")))
    assert len(runs) == 2 and history_and_config(runs[-1])[0][3]["reward_mean"] == 1.0

    fresh = open_writer(c, workdir, resume=False)  # a fresh start in the workdir: a new run
    fresh.close()
    assert fresh.run_id != run_id


def test_a_resume_does_not_send_the_steps_the_killed_process_logged(tmp_path):
    """Killed after logging step 4, resumed from checkpoint 2: the continued W&B run gets step 5
    on only (W&B takes increasing steps); steps 3-4 keep the first process's values there."""
    pytest.importorskip("wandb")
    workdir = str(tmp_path / "run")
    os.makedirs(workdir)
    c = offline_config(tmp_path)
    writer = MetricsWriter(workdir, tensorboard=False, extra=open_writer(c, workdir, resume=False))
    for step in (1, 2, 3, 4):
        writer.write(step, {"reward_mean": 0.1 * step})
    writer.close()
    os.makedirs(tmp_path / "resumed")  # wandb names offline run directories by the second: keep them apart
    c.wandb.dir = str(tmp_path / "resumed")
    writer = MetricsWriter(workdir, resume_step=2, tensorboard=False, extra=open_writer(c, workdir, resume=True))
    for step in (3, 4, 5):
        writer.write(step, {"reward_mean": 1.0 + step})
    writer.close()
    run_id = open(os.path.join(workdir, RUN_ID_FILE)).read().strip()
    (first,) = glob.glob(str(tmp_path / "wandb" / f"offline-run-*-{run_id}"))
    (resumed,) = glob.glob(str(tmp_path / "resumed" / "wandb" / f"offline-run-*-{run_id}"))
    assert sorted(history_and_config(first)[0]) == [1, 2, 3, 4]
    history = history_and_config(resumed)[0]
    assert list(history) == [5] and history[5]["reward_mean"] == 6.0


@pytest.mark.parametrize(
    "override, message",
    [
        ("--config.wandb.mode=on", "wandb.mode='on': must be one of disabled, online, offline"),
        ("--config.wandb.project=", "wandb.project='': a W&B project name is required"),
        ("--config.wandb.dir=/no/such/dir", "wandb.dir='/no/such/dir': no such directory"),
    ],
)
def test_bad_value_is_one_error_line_and_nothing_is_written(tmp_path, capsys, override, message):
    workdir = tmp_path / "run"
    assert loop.main([override, f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not workdir.exists()


def test_help_lists_the_new_keys(capsys):
    with pytest.raises(SystemExit):
        loop.main(["--help"])
    out = capsys.readouterr().out
    for key in ("wandb.mode='disabled'", "wandb.project='microcoder_jax'", "wandb.tags=()", "wandb.dir=''"):
        assert f"--config.{key}" in out, key


def test_wandb_is_never_imported_when_off(tmp_path):
    code = (
        "import sys; from microcoder_jax import config as c; from microcoder_jax.config import validate; "
        "from microcoder_jax.trainer import loop, metrics; validate(c.demo_config()); "
        "w = metrics.MetricsWriter(sys.argv[1], tensorboard=False, extra=loop.wandb_writer.open_writer("
        "c.demo_config(), sys.argv[1], resume=False)); w.write(1, {'x': 1.0}); w.close(); "
        "print('wandb' in sys.modules, w._extra)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert out.stdout.split() == ["False", "None"], out.stderr[-2000:]


def test_offline_mode_without_wandb_installed_is_a_config_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    c = offline_config("/tmp")
    with pytest.raises(config_lib.ConfigError, match=r"pip install 'microcoder_jax\[wandb\]'"):
        validate(c)
