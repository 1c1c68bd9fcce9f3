"""A short soak of the judge pool (a few thousand program runs of the benchmark's mix): memory,
descriptors and files under its temp root must not grow after warm-up, and none may be left."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import judge_soak  # noqa: E402


@pytest.mark.slow
def test_a_short_soak_does_not_grow():
    result = judge_soak.soak(4000, workers=2, every=2.0, log=lambda m: None)
    assert len(result["samples"]) >= 4 and result["samples"][-1]["runs"] >= 4000
    assert set(result["verdicts"]) == {"passed", "wrong_answer", "runtime_error", "timeout"}
    g = judge_soak.growth(result)
    g["throughput_ratio"] = 1.0  # wall-clock is not asserted (a shared machine's load moves it)
    assert judge_soak.failures(g) == [], g
