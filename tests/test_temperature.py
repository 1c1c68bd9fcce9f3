"""Scheduler decisions on scripted diversity traces, the probe, and state round-trips."""

import json

import numpy as np
import pytest

from microcoder_jax.sampling.temperature import TemperatureScheduler

STAGES = (0.6, 0.8, 1.0, 1.2, 1.4)
KNOBS = dict(
    policy="diversity",
    temperature=1.0,
    stages=STAGES,
    target_low=0.5,
    target_high=0.7,
    window=5,
    min_interval=10,
    swing_std=0.08,
)


def _run(scheduler, trace, start=0):
    return [scheduler.update(start + i, {"group_distinct_4": v}) for i, v in enumerate(trace)]


def test_constant_never_moves():
    s = TemperatureScheduler({"temperature": 0.9})
    decisions = _run(s, np.linspace(0.9, 0.0, 50))
    assert all(d.action == "keep" and d.temperature == 0.9 for d in decisions)


def test_staged_switches_at_the_listed_step():
    s = TemperatureScheduler(dict(policy="staged", schedule=[(0, 0.6), (140, 1.8)]))
    assert s.temperature == 0.6
    temps = {}
    for step in range(200):
        temps[step] = s.temperature  # the temperature used to sample this step
        d = s.update(step, {})
        assert d.action in ("keep", "set")
    assert temps[139] == 0.6 and temps[140] == 1.8 and temps[199] == 1.8
    assert [h["temperature"] for h in s.history] == [1.8]


def test_falling_trend_below_band_raises_one_stage():
    s = TemperatureScheduler(KNOBS)
    decisions = _run(s, [0.45, 0.44, 0.43, 0.42, 0.41])
    assert [d.action for d in decisions] == ["keep"] * 4 + ["up"]
    assert s.temperature == 1.2 and "falling" in decisions[-1].reason


def test_low_but_rising_or_inside_band_keeps():
    s = TemperatureScheduler(KNOBS)
    decisions = _run(s, [0.40, 0.41, 0.42, 0.43, 0.44] + [0.6, 0.62, 0.58, 0.61, 0.6])
    assert all(d.action == "keep" for d in decisions) and s.temperature == 1.0


def test_wild_swings_above_band_lower_one_stage():
    s = TemperatureScheduler(KNOBS)
    decisions = _run(s, [0.95, 0.72, 0.98, 0.7, 0.96])
    assert decisions[-1].action == "down" and s.temperature == 0.8
    assert "swinging" in decisions[-1].reason
    # High but steady is not a reason to move.
    s = TemperatureScheduler(KNOBS)
    assert all(d.action == "keep" for d in _run(s, [0.9, 0.91, 0.9, 0.92, 0.9]))


def test_no_change_inside_min_interval_and_never_a_ramp():
    s = TemperatureScheduler(KNOBS)
    trace = np.linspace(0.45, 0.05, 60)  # below the band and falling the whole time
    decisions = _run(s, trace)
    changes = [d for d in decisions if d.changed]
    steps = [d.step for d in changes]
    assert steps == [4, 14]  # the first full window, then min_interval later: the top stage
    assert all(b - a >= KNOBS["min_interval"] for a, b in zip(steps, steps[1:]))
    for d in changes:  # one stage at a time, always onto the ladder
        assert STAGES.index(d.temperature) == STAGES.index(d.previous) + 1
    assert s.temperature == STAGES[-1]
    assert "top stage" in decisions[-1].reason


def test_nan_signal_is_skipped():
    s = TemperatureScheduler(KNOBS)
    d = s.update(0, {"group_distinct_4": float("nan")})
    assert d.action == "keep" and s.observations == []


def test_probe_picks_lowest_stage_reaching_band():
    calls = []

    def sample_fn(temperature):
        calls.append(temperature)
        # Below T = 1.0 the two rows of the group are copies (group distinct-4 = 0.5), above not.
        rng = np.random.default_rng(int(temperature * 10))
        row = rng.integers(0, 1000, size=(1, 16))
        other = row if temperature < 1.0 else rng.integers(0, 1000, size=(1, 16))
        return np.concatenate([row, other]), np.array([16, 16]), np.array([0.1, 0.1])

    s = TemperatureScheduler({**KNOBS, "target_low": 0.9, "target_high": 1.0})
    d = s.probe(sample_fn, group_size=2)
    assert calls == [0.6, 0.8, 1.0] and d.temperature == 1.0 and s.temperature == 1.0
    assert d.action == "probe" and "lowest stage" in d.reason
    # Probe counts as a change: nothing moves within min_interval of it.
    assert all(not d.changed for d in _run(s, [0.1] * 9, start=1))


def test_state_round_trips_through_json():
    s = TemperatureScheduler(KNOBS)
    _run(s, [0.45, 0.44, 0.43, 0.42, 0.41, 0.4, 0.39])
    state = json.loads(json.dumps(s.state_dict()))
    t = TemperatureScheduler(KNOBS)
    t.load_state_dict(state)
    assert t.state_dict() == s.state_dict()
    trace = np.linspace(0.38, 0.1, 30)
    assert [d.to_dict() for d in _run(s, trace, 7)] == [d.to_dict() for d in _run(t, trace, 7)]


def test_config_errors():
    with pytest.raises(ValueError, match="unknown"):
        TemperatureScheduler({"temprature": 1.0})
    with pytest.raises(ValueError, match="stages"):
        TemperatureScheduler({**KNOBS, "temperature": 0.7})
    with pytest.raises(ValueError, match="schedule"):
        TemperatureScheduler({"policy": "staged"})


def test_config_dict_is_accepted():
    ml_collections = pytest.importorskip("ml_collections")
    s = TemperatureScheduler(ml_collections.ConfigDict(KNOBS))
    assert s.temperature == 1.0 and s.cfg["window"] == 5


RELATIVE = {**KNOBS, "band": "relative", "target_low": 0.8, "target_high": 1.3}


def test_relative_band_follows_the_start_diversity_not_the_papers_values():
    """band=relative: a model whose groups start at 0.2 (far below the paper's 0.55) is heated only
    when its diversity falls below 0.8 x 0.2, and the absolute band would have heated it at once."""
    start = [0.2, 0.2, 0.2, 0.2, 0.2]
    absolute = TemperatureScheduler({**KNOBS, "target_low": 0.55, "target_high": 0.75})
    assert _run(absolute, start)[-1].action == "up"  # below the absolute band and not rising: heats
    s = TemperatureScheduler(RELATIVE)
    assert all(d.action == "keep" for d in _run(s, start)) and s.reference == 0.2
    assert s.band() == pytest.approx((0.16, 0.26))
    decisions = _run(s, [0.15, 0.14, 0.13, 0.12, 0.11], start=5)  # below 0.16 and falling
    assert decisions[-1].action == "up" and "below 0.16" in decisions[-1].reason


def test_relative_probe_measures_the_start_temperature_and_survives_a_resume():
    calls = []

    def sample_fn(temperature):
        calls.append(temperature)
        rng = np.random.default_rng(0)
        row = rng.integers(0, 1000, size=(1, 16))
        return np.concatenate([row, row]), np.array([16, 16]), np.array([0.1, 0.1])  # group distinct-4 0.5

    s = TemperatureScheduler(RELATIVE)
    d = s.probe(sample_fn, group_size=2)
    assert calls == [1.0] and d.temperature == 1.0 and s.reference == pytest.approx(0.5)
    assert "relative band [0.400, 0.650]" in d.reason
    back = TemperatureScheduler(RELATIVE)
    back.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert back.reference == s.reference and back.band() == s.band()


@pytest.mark.parametrize("low,high", [(1.1, 1.3), (0.8, 0.9), (0.0, 1.2)])
def test_a_relative_band_must_contain_the_start(low, high):
    with pytest.raises(ValueError, match=r"temperature.target_low=.*band=relative.*0 < target_low <= 1 <= target_high"):
        TemperatureScheduler({**RELATIVE, "target_low": low, "target_high": high})
