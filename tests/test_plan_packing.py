"""The planner's padded-vs-packed estimate of the two training passes (analytic, no compile)."""

import os

import numpy as np

from microcoder_jax import cli
from microcoder_jax.plan import packing as plan_packing
from microcoder_jax.plan.topologies import parse_topology

PAPER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "paper.py") + ":qwen3-1.7b,microcoder"


def test_lognormal_lengths_have_the_asked_mean_and_cap_share():
    lengths = plan_packing.lognormal_lengths(np.random.default_rng(0), 200_000, 4096, 0.45, 0.05)
    assert lengths.min() >= 1 and lengths.max() == 4096
    assert abs(lengths.mean() / 4096 - 0.45) < 0.01 and abs((lengths == 4096).mean() - 0.05) < 0.005


def test_packed_passes_are_faster_on_skewed_lengths_and_count_ici():
    config = cli.load_config(PAPER)
    result = plan_packing.compare(config, parse_topology("v5e-8"), 0.45, 0.05)
    assert result["useful_packed_step"] > 1.4 * result["useful_padded"]
    assert result["packed_rows_step"] < result["rows"]
    for prog in ("old log-probs", "train step"):
        pad, pack = (result["passes"][(prog, k)] for k in ("padded", "packed"))
        assert pad["ici_s"] > 0 and pack["ici_s"] < pad["ici_s"]
        assert pack["compute_s"] + pack["ici_s"] < 0.75 * (pad["compute_s"] + pad["ici_s"])
    text = plan_packing.render(result, 0.45, 0.05)
    assert "train step" in text and "old log-probs" in text and "estimate" in text


def test_collective_bytes_count_the_head_per_chunk_only_when_asked():
    from microcoder_jax import config as config_lib
    from microcoder_jax.plan import planner, programs

    config = cli.load_config(PAPER)
    mesh = planner.abstract_mesh(config, 8)
    mc = programs.rl_step_programs(config, config_lib.rl_config_of(config), mesh, tpu=True)[0].model_config
    once = plan_packing.collective_bytes(mc, mesh, 1, train=True)
    per_chunk = plan_packing.collective_bytes(mc, mesh, 1, train=True, chunks=12)
    head = mc.vocab_size * mc.hidden_size * 2 * 7 / 8
    np.testing.assert_allclose(per_chunk - once, 24 * head)
