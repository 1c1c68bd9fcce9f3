"""Config defaults, config files, command-line overrides, validation and their errors."""

import dataclasses
import os

import pytest

from microcoder_jax import cli
from microcoder_jax import config as config_lib
from microcoder_jax.config import validate
from microcoder_jax.rl.config import RLConfig
from microcoder_jax.rl.presets import PRESETS
from microcoder_jax.sampling import temperature

PAPER = os.path.join(config_lib.config_dir(), "paper.py")
DEMO = os.path.join(config_lib.config_dir(), "demo.py")
SETTINGS = [f"{m},{a}" for m in ("qwen3-1.7b", "qwen3-4b") for a in ("microcoder", "grpo", "dapo")]


def load(*argv):
    return cli.parse(list(argv), prog="test", doc="", default_file=config_lib.DEFAULT_FILE).config


def test_all_config_files_exist():
    assert os.path.exists(PAPER) and os.path.exists(DEMO)


@pytest.mark.parametrize("arg", [None, *SETTINGS])
def test_config_file_builds_rl_config_and_scheduler(arg):
    c = load(f"--config={PAPER}:{arg}") if arg else load(f"--config={DEMO}")
    rl = config_lib.rl_config_of(c)
    assert isinstance(rl, RLConfig)
    assert rl.group_size == c.sampling.group_size and rl.total_steps == c.train.steps
    temperature.TemperatureScheduler(c.temperature.to_dict())  # the scheduler accepts every knob


@pytest.mark.parametrize("model", ["qwen3-1.7b", "qwen3-4b"])
def test_baselines_differ_only_in_algorithm_block(model):
    dicts = {a: config_lib.to_dict(load(f"--config={PAPER}:{model},{a}")) for a in ("microcoder", "grpo", "dapo")}
    rls = {a: d.pop("rl") for a, d in dicts.items()}
    assert dicts["microcoder"] == dicts["grpo"] == dicts["dapo"]
    presets = {a: config_lib.rl_config_of(load(f"--config={PAPER}:{model},{a}")) for a in rls}
    assert presets["microcoder"].truncation == "conditional" and presets["microcoder"].rho == 0.1
    assert presets["grpo"].kl_beta > 0 and presets["grpo"].aggregation == "seq_mean_token_mean"
    assert presets["dapo"].dynamic_sampling and presets["dapo"].truncation == "soft_overlong"
    assert {a: {k: v for k, v in r.items() if k != "preset"} for a, r in rls.items()}["grpo"] == {
        k: v for k, v in rls["microcoder"].items() if k != "preset"
    }  # the preset name is the difference


def test_paper_setting_and_bad_argument():
    c = load(f"--config={PAPER}:qwen3-1.7b,microcoder")
    assert (c.data.num_prompts, c.sampling.group_size, c.sampling.max_new_tokens) == (64, 8, 4096)
    assert c.temperature.temperature == 1.2 and c.eval.max_new_tokens == 8192
    assert load(f"--config={PAPER}:qwen3-4b,dapo").rl.micro_batch_size == 4
    with pytest.raises(config_lib.ConfigError, match="MODEL,ALGO"):
        load(f"--config={PAPER}:qwen3-70b,microcoder")


def test_overrides_parse_by_type():
    c = load(
        "--config.rl.rho=0.2",
        "--config.train.steps=7",
        "--config.data.prompt_buckets=(64,128)",
        "--config.train.progress=false",
        "--config.model.path=/x/y",
        "--config.rl.decay=cosine",
        "--config.rl.learning_rate=1",
        "--config.data.train_files=a.jsonl,b-*.jsonl",
    )
    assert c.rl.rho == 0.2 and c.train.steps == 7 and c.data.prompt_buckets == (64, 128)
    assert c.train.progress is False and c.model.path == "/x/y" and c.rl.decay == "cosine"
    assert c.rl.learning_rate == 1.0 and isinstance(c.rl.learning_rate, float)
    assert c.data.train_files == ("a.jsonl", "b-*.jsonl")


def test_missing_config_file_and_unknown_flag_are_one_line_errors(tmp_path):
    with pytest.raises(config_lib.ConfigError, match=r"^--config=.*nope.py: no such config file$"):
        load(f"--config={tmp_path}/nope.py")
    with pytest.raises(config_lib.ConfigError, match="bogus"):
        load("--bogus=1")


def test_unknown_key_names_the_closest_keys_and_points_to_help():
    with pytest.raises(config_lib.ConfigError) as e:
        load("--config.rl.rhoo=0.2")
    message = str(e.value)
    assert "rl.rhoo" in message and "did you mean rl.rho?" in message and "--help" in message
    assert "train.steps" not in message and len(message) < 300, message


@pytest.mark.parametrize("override", ["train.steps=abc", "train.progress=maybe", "train=1", "steps", "rl.rho=abc"])
def test_bad_overrides_are_errors(override):
    with pytest.raises(config_lib.ConfigError):
        load(f"--config.{override}")


@pytest.mark.parametrize(
    "override, key",
    [
        ("rl.rho=1.5", "rho"),
        ("temperature.policy=bogus", "policy"),
        ("model.remat=some", "model.remat"),
        ("sampling.top_p=0", "sampling.top_p"),
        ("data.task=other", "data.task"),
        ("mesh.fsdp=0", "mesh"),
        ("eval.date_from=yesterday", "eval.date_from"),
        ("rl.truncation=sometimes", "truncation"),
        ("eval.files=/no/such/file.jsonl", "eval.files"),
        ("distributed.initialize=sometimes", "distributed.initialize.*auto, always, never"),
        ("model.path=/no/such/dir", "model.path"),
        ("sampling.group_size=1", "sampling.group_size"),
    ],
)
def test_bad_values_are_refused_by_validation(override, key):
    c = load(f"--config.{override}")
    with pytest.raises(config_lib.ConfigError, match=key):
        validate(c)


def test_validation_accepts_the_shipped_configs():
    validate(config_lib.demo_config())
    validate(
        load(
            f"--config={PAPER}:qwen3-1.7b,grpo",
            f"--config.data.train_files={PAPER}",
            f"--config.tokenizer.path={config_lib.config_dir()}",
        )
    )


def test_unknown_rl_field_is_an_error():
    c = config_lib.demo_config()
    c.rl.not_a_field = 1
    with pytest.raises(ValueError, match="not_a_field"):
        config_lib.rl_config_of(c)


def test_every_key_has_a_meaning_and_help_lists_it(capsys):
    meanings = config_lib.meanings()
    for key in config_lib.flat_keys(config_lib.default_config()):
        assert meanings.get(key), key
    with pytest.raises(SystemExit):
        cli.parse(["--help", "--config.rl.rho=0.3"], prog="test", doc="the doc", default_file=config_lib.DEFAULT_FILE)
    out = capsys.readouterr().out
    assert "--config.rl.rho=0.3" in out and "--config.train.steps=50" in out and meanings["rl.rho"] in out


def test_defaults_have_one_source():
    """The rl block is RLConfig's defaults (None where a preset sets the field); every other block
    is its typed block's defaults, and a block built from the default config equals its defaults."""
    c = config_lib.default_config()
    preset_set = {k for p in PRESETS.values() for k in p}
    for f in dataclasses.fields(RLConfig):
        if f.name in config_lib.rl_from_run() or f.name == "preset":
            continue
        assert c.rl[f.name] == (None if f.name in preset_set else f.default), f.name
    for name, cls in config_lib.block_types().items():
        if cls is not RLConfig:
            assert cls.from_node(c[name]) == cls(), name
    assert temperature.TemperatureScheduler().temperature == c.temperature.temperature == 1.2


def test_every_knob_has_a_meaning():
    """--help explains every key: each block field and each RLConfig field carries its meaning."""
    missing = [k for k, _, meaning in config_lib.all_keys() if not meaning.strip()]
    assert not missing, missing
    assert all(f.metadata.get("meaning", "").strip() for f in dataclasses.fields(RLConfig))
    assert config_lib.rl_from_run() == {
        "group_size": "sampling.group_size",
        "total_steps": "train.steps",
        "max_turns": "env.max_turns",  # read as env's turns: 1 for the code task (rl_overrides)
    }


def test_the_loops_knobs_read_under_their_old_rl_names(tmp_path, capsys):
    """train.off_policy_steps, partial_rollouts, partial_recompute, max_staleness and max_refills
    used to be rl.* keys: a command line or config file that sets the old name is read as the new
    one (a note on stderr), the algorithm's block no longer has them, and both names set differently
    is one clear error."""
    c = load("--config.rl.off_policy_steps=1", "--config.rl.max_refills", "3")
    assert "--config.rl.off_policy_steps is now --config.train.off_policy_steps" in capsys.readouterr().err
    typed = validate(c)
    assert (typed["train"].off_policy_steps, typed["train"].max_refills) == (1, 3)
    assert typed["rl"].is_correction == "tis"  # auto, from the loop's block
    assert not {"off_policy_steps", "max_refills"} & {f.name for f in dataclasses.fields(RLConfig)}
    path = tmp_path / "old.py"
    path.write_text(
        "from microcoder_jax.config import demo_config\n\n\ndef get_config(arg=None):\n"
        "    c = demo_config()\n    c.rl.max_staleness = 2\n    c.rl.partial_recompute = False\n    return c\n"
    )
    c = load(f"--config={path}")
    assert "rl.max_staleness is now train.max_staleness" in capsys.readouterr().err
    assert (validate(c)["train"].max_staleness, c.train.partial_recompute) == (2, False)
    c = config_lib.demo_config()
    c.rl.off_policy_steps, c.train.off_policy_steps = 1, 2
    with pytest.raises(config_lib.ConfigError, match=r"rl.off_policy_steps=1 and train.off_policy_steps=2: .*set only"):
        validate(c)


def test_the_judges_block_reads_under_its_old_name_evaluator(tmp_path, capsys):
    """The judge's block was `evaluator.*` (beside `eval`, which scores a checkpoint): an old key on
    a command line is read as `judge.*` with a note; a config file that writes `c.evaluator.X` is an
    error naming the new block before anything runs; no key of the old block is left."""
    c = load("--config.evaluator.reward=fraction", "--config.evaluator.workers", "3")
    err = capsys.readouterr().err
    assert "--config.evaluator.reward is now --config.judge.reward" in err and "judge.workers" in err
    typed = validate(c)
    assert (typed["judge"].reward, typed["judge"].workers) == ("fraction", 3) and "evaluator" not in c
    assert set(config_lib.moved_keys()) >= {f"evaluator.{f.name}" for f in dataclasses.fields(typed["judge"])}
    path = tmp_path / "old.py"
    path.write_text(
        "from microcoder_jax.config import demo_config\n\n\ndef get_config(arg=None):\n"
        "    c = demo_config()\n    c.evaluator.timeout = 3.0\n    return c\n"
    )
    with pytest.raises(config_lib.ConfigError, match=r"the `evaluator` block is now `judge`: write c.judge.X"):
        load(f"--config={path}")


def test_a_run_saved_with_the_old_names_resumes_under_the_new_ones():
    from microcoder_jax.trainer import resume

    saved = config_lib.to_dict(config_lib.demo_config())
    saved["rl"]["off_policy_steps"] = saved["train"].pop("off_policy_steps")  # as a run of the old layout wrote it
    saved["rl"]["max_refills"] = saved["train"].pop("max_refills")
    saved["evaluator"] = saved.pop("judge")  # the judge's block under its old name
    new = config_lib.to_dict(config_lib.demo_config())
    assert resume.check_config(saved, new, allow_change=False) == []
    assert "off_policy_steps" in saved["rl"] and "evaluator" in saved  # the caller's dict is left as it was
    new["judge"]["timeout"] = 9.0
    with pytest.raises(resume.ConfigChangeError, match=r"judge.timeout: 2.0 -> 9.0"):
        resume.check_config(saved, new, allow_change=False)
    new["judge"]["timeout"] = saved["evaluator"]["timeout"]
    new["train"]["off_policy_steps"] = 1
    with pytest.raises(resume.ConfigChangeError, match=r"train.off_policy_steps: 0 -> 1"):
        resume.check_config(saved, new, allow_change=False)
