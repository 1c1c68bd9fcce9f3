"""The data pipeline CLI: --help says what it reads and where it writes, that folder is
git-ignored, and a data source can be added from the command line."""
import json
import os
import subprocess
import sys

import pytest

from microcoder_jax.data.pipeline import __main__ as cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "microcoder_jax", "data", "samples", "problems.jsonl")


def test_help_names_inputs_and_outputs():
    out = subprocess.run([sys.executable, "-m", "microcoder_jax.data.pipeline", "--help"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60).stdout
    assert "Reads:" in out and "Writes:" in out and "--source" in out
    assert "./data_pipeline" in out and "export/train-" in out
    assert "cannot list" not in out  # its own keys, not the run config's
    assert "--config.filter.max_tests=32  larger test sets are sampled down" in out
    assert "--config.sources.samples.harness=''" in out and "--config.verify.timeout=6.0" in out


def test_default_output_folder_is_git_ignored():
    proc = subprocess.run(["git", "check-ignore", "-q", "data_pipeline/export/train-00000-of-00004.jsonl"],
                          cwd=ROOT, timeout=30)
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
