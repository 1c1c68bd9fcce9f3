"""RLConfig validation, presets and the learning-rate schedule."""

import math

import jax
import numpy as np
import pytest

from microcoder_jax.rl.config import RLConfig
from microcoder_jax.rl.presets import PRESETS, make_rl_config
from microcoder_jax.rl.step import learning_rate_schedule


def test_presets_match_the_method_spec():
    grpo, dapo, mc = (make_rl_config(p) for p in ("grpo", "dapo", "microcoder"))
    assert (grpo.eps_low, grpo.eps_high, grpo.aggregation, grpo.kl_beta) == (0.2, 0.2, "seq_mean_token_mean", 0.001)
    assert grpo.uses_reference and not dapo.uses_reference and not mc.uses_reference
    assert (dapo.eps_high, dapo.aggregation, dapo.dynamic_sampling) == (0.28, "token_mean", True)
    assert dapo.truncation == "soft_overlong"
    assert (mc.truncation, mc.rho, mc.repeat_m, mc.non_incorrect) == ("conditional", 0.1, 128, "not_judged_wrong")
    assert RLConfig() == mc  # the defaults are the microcoder preset
    assert hash(mc) == hash(make_rl_config("microcoder"))  # hashable: usable as a static arg
    assert set(PRESETS) == {"grpo", "dapo", "microcoder"}


def test_overrides_and_validation():
    assert make_rl_config("dapo", truncation="overlong_filter").truncation == "overlong_filter"
    with pytest.raises(ValueError, match="unknown RL preset"):
        make_rl_config("ppo")
    with pytest.raises(ValueError, match="unknown RLConfig fields"):
        make_rl_config("grpo", epsilon=0.1)
    for bad in (
        dict(truncation="cut"),
        dict(aggregation="sum"),
        dict(rho=1.5),
        dict(group_size=1),
        dict(dual_clip=0.5),
        dict(non_incorrect="maybe"),
    ):
        with pytest.raises(ValueError):
            RLConfig(**bad)


@pytest.mark.parametrize("decay", ["constant", "linear", "cosine"])
def test_schedule_counts_rollout_steps(decay):
    cfg = RLConfig(learning_rate=1.0, warmup_steps=4, total_steps=12, decay=decay, end_lr_ratio=0.1, num_minibatches=3)
    sched = learning_rate_schedule(cfg)
    lr = lambda step: float(jax.jit(sched)(step * 3 + 1))  # any update within a rollout step
    np.testing.assert_allclose([lr(s) for s in range(4)], [0.25, 0.5, 0.75, 1.0], rtol=1e-6)
    progress = lambda s: (s - 4) / 8
    want = {
        "constant": lambda s: 1.0,
        "linear": lambda s: 1 - 0.9 * progress(s),
        "cosine": lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress(s))),
    }[decay]
    for s in (4, 6, 8, 12, 20):
        np.testing.assert_allclose(lr(s), want(min(s, 12)), rtol=1e-5)


def test_names_are_checked_against_the_registry():
    for field, kind, name in (
        ("truncation", "truncation rule", "conditional"),
        ("adv_std", "advantage scaler", "group"),
        ("aggregation", "loss aggregation", "token_mean"),
    ):
        with pytest.raises(ValueError) as e:
            RLConfig(**{field: "bogus"})
        msg = str(e.value)
        assert msg.startswith(f"rl.{field}='bogus': unknown {kind}; registered: ") and name in msg
    with pytest.raises(ValueError, match="adv_std_ddof"):
        RLConfig(adv_std_ddof=2)
    with pytest.raises(ValueError, match="loss_constant"):
        RLConfig(aggregation="constant", loss_constant=0.0)


def test_a_registered_function_is_a_valid_name_and_is_used():
    import jax.numpy as jnp

    from microcoder_jax.rl import registry
    from microcoder_jax.rl.losses import loss_weights

    @registry.register_aggregation("test_row_sum")
    def row_sum(mask, constant=None):
        return mask.astype(jnp.float32) / mask.shape[0]

    try:
        assert RLConfig(aggregation="test_row_sum").aggregation == "test_row_sum"
        mask = jnp.array([[0, 1, 1], [0, 1, 0]])
        np.testing.assert_allclose(np.asarray(loss_weights(mask, "test_row_sum")), [[0, 0.5, 0.5], [0, 0.5, 0]])
        with pytest.raises(ValueError, match="already registered"):
            registry.register_aggregation("token_mean")(row_sum)
    finally:
        del registry.LOSS_AGGREGATIONS["test_row_sum"]
