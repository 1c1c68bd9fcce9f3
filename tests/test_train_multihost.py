"""Multi-host pieces of the training loop: distributed init from the config, problem-file globs,
and a 2-process run of the demo on one 4-device mesh (localhost, 2 fake CPU devices each)."""
import jax
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax import train


def test_distributed_init_is_a_no_op_on_one_cpu_process():
    config = config_lib.demo_config()
    train.initialize_distributed(config)  # auto on a CPU platform: nothing to join
    with config.unlocked():
        config.distributed.num_processes = 1  # explicit single process
    train.initialize_distributed(config)
    assert jax.process_count() == 1 and not jax.distributed.is_initialized()


def test_distributed_init_rejects_unknown_modes():
    config = config_lib.load_config(None, ["distributed.initialize=sometimes"])
    with pytest.raises(config_lib.ConfigError, match="auto, always or never"):
        train.initialize_distributed(config)


def _write(path, problems):
    from microcoder_jax.evaluator.problems import save_problems

    save_problems(problems, str(path))
    return str(path)


def test_problem_files_accept_globs_and_comma_strings(tmp_path):
    from microcoder_jax.data import demo_task, loader

    problems = demo_task.make_problems(("sum", "product"), 3, 2, 0, 1)
    for i in range(3):
        _write(tmp_path / f"train-{i}.jsonl", problems[2 * i:2 * i + 2])
    _write(tmp_path / "other.jsonl", problems[:1])
    ids = lambda ps: [p.question_id for p in ps]  # noqa: E731
    by_glob, skipped = loader.read_problems((str(tmp_path / "train-*.jsonl"),))
    assert ids(by_glob) == ids(problems) and skipped == 0  # sorted matches, in file order
    as_string = loader.read_problems(f"{tmp_path}/train-2.jsonl,{tmp_path}/train-[01].jsonl")[0]
    assert ids(as_string) == ids(problems[4:] + problems[:4])
    assert loader.expand_paths(f"{tmp_path}/other.jsonl, {tmp_path}/t*-0.jsonl") == [
        f"{tmp_path}/other.jsonl", f"{tmp_path}/train-0.jsonl"]
    with pytest.raises(FileNotFoundError, match="nothing-\\*.jsonl"):
        loader.read_problems([str(tmp_path / "nothing-*.jsonl")])
    config = config_lib.load_config(None, [f"data.train_files={tmp_path}/train-*.jsonl,{tmp_path}/other.jsonl"])
    assert config.data.train_files == (f"{tmp_path}/train-*.jsonl", f"{tmp_path}/other.jsonl")
    assert len(loader.read_problems(config.data.train_files)[0]) == len(problems) + 1


def test_judge_hides_the_problem_files(tmp_path, monkeypatch):
    from microcoder_jax.data import demo_task

    problems = demo_task.make_problems(("sum",), 2, 1, 0, 1)
    a = _write(tmp_path / "train-0.jsonl", problems)
    b = _write(tmp_path / "eval.jsonl", problems)
    monkeypatch.chdir(tmp_path)
    config = config_lib.load_config(None, ["data.train_files=train-*.jsonl", "eval.files=eval.jsonl"])
    assert train.problem_files(config) == sorted([a, b])
    assert train.problem_files(config, f"{tmp_path}/x.jsonl") == sorted([a, b, f"{tmp_path}/x.jsonl"])
    assert train.problem_files(config_lib.demo_config()) == []

