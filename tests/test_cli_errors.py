"""A missing or broken config file is one `error:` line naming the file, for every command with --config."""

from __future__ import annotations

import os

import pytest

from microcoder_jax.config import config_dir
from microcoder_jax.dataset.__main__ import main as pipeline_main
from microcoder_jax.plan.__main__ import main as plan_main
from microcoder_jax.plan.packing import main as packing_main
from microcoder_jax.trainer.evaluation import main as eval_main
from microcoder_jax.trainer.loop import main as train_main

COMMANDS = {  # each with the other arguments it needs, so only the config file can fail
    "train": (train_main, ["--workdir=/nonexistent/run"]),
    "eval": (eval_main, ["--checkpoint=/nonexistent/run"]),
    "plan": (plan_main, ["--topology=v5p-8"]),
    "plan.packing": (packing_main, []),
    "dataset": (pipeline_main, ["all", "--workdir=/nonexistent/pipeline"]),
}

BROKEN = {  # file name -> (its text, what the error line says after the file's name)
    "syntax.py": ("def get_config(:\n", "SyntaxError: invalid syntax (line 1)"),
    "raises.py": ("def get_config():\n    raise KeyError('lr')\n", "get_config() raised KeyError: 'lr'"),
    "imports.py": ("import no_such_module_xyz\n", "loading it raised ModuleNotFoundError: No module named"),
    "no_get.py": ("x = 1\n", "defines no get_config()"),
    "returns_int.py": ("def get_config():\n    return 5\n", "get_config() returned int, not an ml_collections"),
}


def _error_line(capsys, main, argv) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_config_file(command, capsys, tmp_path):
    main, rest = COMMANDS[command]
    line = _error_line(capsys, main, [f"--config={tmp_path}/nope.py", *rest])
    assert line == f"error: --config={tmp_path}/nope.py: no such config file"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", BROKEN)
def test_broken_config_file_names_it_and_its_error(command, name, capsys, tmp_path):
    text, what = BROKEN[name]
    (tmp_path / name).write_text(text)
    main, rest = COMMANDS[command]
    line = _error_line(capsys, main, [f"--config={tmp_path / name}", *rest])
    assert line.startswith(f"error: --config={tmp_path / name}: {what}"), line
    assert "config_config" not in line and "Attempted" not in line and "Traceback" not in line


def test_a_directory_or_an_empty_name_is_not_a_config_file(capsys, tmp_path):
    assert "not a file" in _error_line(capsys, train_main, [f"--config={tmp_path}"])
    assert "names no file" in _error_line(capsys, train_main, ["--config="])


def test_the_config_files_own_check_is_kept_as_it_is(capsys, tmp_path):
    paper = os.path.join(config_dir(), "paper.py")
    line = _error_line(capsys, train_main, [f"--config={paper}:qwen3-70b,microcoder"])
    assert line.startswith("error: configs/paper.py:qwen3-70b,microcoder: expected MODEL,ALGO"), line
    (tmp_path / "checks.py").write_text("def get_config(arg):\n    raise ValueError(f'unknown size {arg!r}')\n")
    line = _error_line(capsys, train_main, [f"--config={tmp_path}/checks.py:xl"])
    assert line == f"error: --config={tmp_path}/checks.py:xl: unknown size 'xl'", line


@pytest.mark.parametrize(
    "override, line",
    [  # RLConfig's checks and the blocks' knob checks: one format
        ("rl.rho=1.5", "rl.rho=1.5: must lie in [0, 1]"),
        ("rl.decay=x", "rl.decay='x': must be one of"),
        ("rl.truncation=sometimes", "rl.truncation='sometimes': unknown truncation rule; registered: conditional"),
        ("rl.preset=x", "rl.preset='x': unknown RL preset; choose from dapo, grpo, microcoder"),
        ("rl.repeat_m=0", "rl.repeat_m=0: must be a number >= 1"),
        ("train.steps=-3", "train.steps=-3: must be a number >= 0"),
        ("sampling.top_p=0", "sampling.top_p=0.0: must lie in (0, 1]"),
        (  # accepted, it would save nothing
            "train.save_rollouts=(120,)",
            "train.save_rollouts=(120,): step 120 beyond train.steps=50 would never be saved; "
            "use steps 1..50 or raise train.steps",
        ),
    ],
)
def test_bad_values_are_key_value_what_is_wrong(override, line, capsys):
    error = _error_line(capsys, train_main, [f"--config.{override}", "--workdir=/nonexistent/run"])
    assert error.startswith(f"error: {line}"), error
