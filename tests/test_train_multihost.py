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
