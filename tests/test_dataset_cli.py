"""The data pipeline CLI: --help says what it reads and where it writes, that folder is
git-ignored, and a data source can be added from the command line."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from microcoder_jax.dataset import __main__ as cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "microcoder_jax", "data", "samples", "problems.jsonl")


def test_help_names_inputs_and_outputs():
    out = subprocess.run(
        [sys.executable, "-m", "microcoder_jax.dataset", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    ).stdout
    assert "Reads:" in out and "Writes:" in out and "--source" in out
    assert "./data_pipeline" in out and "export/train-" in out
    assert "cannot list" not in out  # its own keys, not the run config's
    assert "--config.filter.max_tests=32  larger test sets are sampled down" in out
    assert "--config.sources.samples.harness=''" in out and "--config.verify.timeout=6.0" in out
    keys = [line.split() for line in out.splitlines() if line.startswith("  --config.")]
    assert len(keys) > 40 and [k[0] for k in keys if len(k) < 2] == []  # every knob has a meaning


def test_the_config_file_starts_from_the_one_set_of_defaults():
    from microcoder_jax.config import flat_keys
    from microcoder_jax.dataset import config

    spec = importlib.util.spec_from_file_location("dp_config", os.path.join(ROOT, "configs", "data_pipeline.py"))
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    defaults = config.default_config()
    assert loaded.get_config().to_dict() == defaults.to_dict()
    knobs = {k for k, _, _ in config.KNOBS} - {"filter.difficulty.pass_rate_fn_kwargs"}  # an empty dict: no leaf
    assert {k for k in flat_keys(defaults) if not k.startswith("sources.")} == knobs
    assert config.source("/p", "apps", limit=3).to_dict() == {
        "path": "/p",
        "format": "apps",
        "priority": 100,
        "limit": 3,
        "harness": "",
    }


def test_stage_counts_are_printed_once_and_the_report_is_named(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "microcoder_jax.dataset", "collect", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout + proc.stderr).count("'rows': 24, 'dropped': 0") == 1, (proc.stdout, proc.stderr)
    assert "stage collect: done in" in proc.stderr  # progress on stderr, the counts on stdout


@pytest.mark.parametrize(
    "args, line",
    [
        (["filter"], "error: filter: needs stage process done in {w} first; run `process` (or `all`)"),
        (["collect", "--config.filter.oversized=bogus"], "error: filter.oversized='bogus': must be one of"),
        (["collect", "--source", "x=/a,format=zzz"], "error: sources.x.format='zzz': must be one of 'auto'"),
        (["collect", "--source", "x=/a,limit=z"], "error: --source 'x=/a,limit=z': limit='z' is not an integer"),
    ],
)
def test_bad_stage_order_and_values_are_one_line(args, line, tmp_path, capsys):
    assert cli.main([*args, "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line.format(w=tmp_path)) and len(err.strip().splitlines()) == 1, err
    assert not os.listdir(tmp_path)  # nothing written


def test_default_output_folder_is_git_ignored():
    proc = subprocess.run(
        ["git", "check-ignore", "-q", "data_pipeline/export/train-00000-of-00004.jsonl"], cwd=ROOT, timeout=30
    )
    assert proc.returncode == 0


def test_source_from_the_command_line_is_collected(tmp_path, capsys):
    extra = tmp_path / "extra.jsonl"
    extra.write_text("".join(open(SAMPLES).readlines()[:3]))
    workdir = tmp_path / "out"
    args = ["collect", "--config", os.path.join(ROOT, "configs", "data_pipeline.py"), "--workdir", str(workdir)]
    assert cli.main(args) == 0
    base = json.load(open(workdir / "collect" / "_DONE.json"))
    assert cli.main(args + ["--force", "--source", f"extra={extra},format=ours,priority=1"]) == 0
    done = json.load(open(workdir / "collect" / "_DONE.json"))
    assert done["rows"] == base["rows"] + 3


@pytest.mark.parametrize("spec", ["noequals", "x=", "x=/a,colour=red", "1x=/a"])
def test_bad_source_spec_is_a_usage_error(spec, capsys):
    code = cli.main(["collect", "--config", os.path.join(ROOT, "configs", "data_pipeline.py"), "--source", spec])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --source") and "Traceback" not in err
