"""The sampling-temperature scheduler: constant, staged, or driven by the batch's diversity.

docs/method.md (temperature). The paper observed that a constant low temperature lets Qwen3's output
diversity collapse, that a staged switch beats every constant temperature, and that continuous
ramps destabilise training. So the temperature only ever moves in discrete stages, at most one
stage per `min_interval` steps, and every decision is returned and logged with its reason.

Knobs: `TemperatureConfig` below (the `temperature.*` block; a dict or ConfigDict of its fields
is accepted too, unknown keys are an error).

Rules of the "diversity" policy, after each step's `update(step, metrics)`:
- up one stage when every value in the window is below `target_low` and the trend is falling;
- down one stage when the window's mean is above `target_high` and it swings (std > swing_std);
- otherwise keep. Observations are cleared after a change: they describe the old temperature.
With `band=relative` the band is target_low/high times the diversity at the start temperature
(measured by the probe, or the first batch), for models whose groups never reach the paper's band.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Callable, Mapping

import numpy as np

from microcoder_jax.blocks import Block, knob
from microcoder_jax.sampling.diversity import diversity_metrics

logger = logging.getLogger(__name__)

POLICIES = ("constant", "staged", "diversity")
BANDS = ("absolute", "relative")


@dataclasses.dataclass(frozen=True)
class TemperatureConfig(Block):
    """The `temperature.*` block: the policy and its knobs (validated together)."""

    PREFIX = "temperature"

    policy: str = knob("constant", "constant, staged (schedule) or diversity (stages, signal, band)", choices=POLICIES)
    temperature: float = knob(1.2, "start temperature (paper: 1.2 is stable for Qwen3)", at_least=0.0)
    schedule: tuple = knob(
        (),
        "staged: ((step, temperature), ...), e.g. ((0, 0.6), (140, 1.8)); from each "
        "step on that temperature (the first pair applies before its step too)",
    )
    stages: tuple = knob((0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8), "diversity: the allowed ladder, ascending")
    signal: str = knob(
        "group_distinct_4", "diversity: the metric that drives it (any key of sampling.diversity.diversity_metrics)"
    )
    target_low: float = knob(0.55, "diversity: up a stage below this on a falling trend")
    target_high: float = knob(0.75, "diversity: down a stage on swings above this")
    band: str = knob(
        "absolute",
        "diversity: target_low/high as values of the signal (absolute: the paper's band) or as multiples of "
        "the diversity measured at the start temperature (relative: for models whose groups start below "
        "the paper's band at every temperature)",
        choices=BANDS,
    )
    window: int = knob(10, "diversity: steps a trend / swing is measured over")
    min_interval: int = knob(20, "diversity: fewest steps between two changes")
    min_slope: float = knob(0.0, "diversity: 'up' needs a slope below -min_slope")
    swing_std: float = knob(0.08, "diversity: 'down' needs the window's std above this")
    probe: bool = knob(
        True, "diversity: probe the ladder on the first batch's prompts and start at the lowest stage in the band"
    )

    def check(self) -> None:
        if self.policy == "staged" and not self.schedule:
            self.fail("schedule", self.schedule, "policy 'staged' needs a non-empty schedule of (step, temperature)")
        if self.policy != "diversity":
            return
        stages = tuple(float(t) for t in self.stages)
        if not stages or list(stages) != sorted(set(stages)):
            self.fail("stages", self.stages, "stages must be ascending and distinct")
        if float(self.temperature) not in stages:
            self.fail("temperature", self.temperature, f"is not one of the stages {stages}")
        if not self.target_low <= self.target_high:
            self.fail("target_low", self.target_low, f"must be <= target_high={self.target_high}")
        if self.band == "relative" and not 0 < self.target_low <= 1 <= self.target_high:
            self.fail(
                "target_low",
                self.target_low,
                f"with band=relative the band is multiples of the start diversity: need 0 < target_low <= 1 <= "
                f"target_high (got target_high={self.target_high}), e.g. 0.9 and 1.3",
            )
        if self.window < 2 or self.min_interval < 1:
            self.fail("window", self.window, "window must be >= 2 and min_interval >= 1")


@dataclasses.dataclass(frozen=True)
class Decision:
    """One scheduler decision. `action`: keep | up | down | set (staged) | probe."""

    step: int
    action: str
    temperature: float
    previous: float
    reason: str
    signal: float | None = None

    @property
    def changed(self) -> bool:
        return self.temperature != self.previous

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _slope(values: np.ndarray) -> float:
    x = np.arange(len(values), dtype=np.float64)
    return float(np.polyfit(x, values, 1)[0])


class TemperatureScheduler:
    """Holds the current temperature and moves it by the configured policy; see the module doc."""

    def __init__(self, config: TemperatureConfig | Mapping[str, Any] | None = None):
        self.config = config if isinstance(config, TemperatureConfig) else TemperatureConfig.from_node(config)
        self.cfg = dataclasses.asdict(self.config)  # the knobs by name
        c = self.cfg
        self.schedule = sorted((int(s), float(t)) for s, t in c["schedule"])
        self.stages = tuple(float(t) for t in c["stages"])
        self.temperature = float(self.schedule[0][1] if c["policy"] == "staged" else c["temperature"])
        self.last_change_step: int | None = None
        self.observations: list[tuple[int, float]] = []  # (step, signal) since the last change
        self.history: list[dict] = []  # every change, as Decision.to_dict()
        self.probed = False
        self.reference: float | None = None  # band=relative: the start diversity the band multiplies

    # ---------------------------------------------------------------- decisions
    def _decide(self, step: int, action: str, temperature: float, reason: str, signal=None) -> Decision:
        decision = Decision(
            int(step), action, float(temperature), self.temperature, reason, None if signal is None else float(signal)
        )
        if decision.changed or action == "probe":
            self.history.append(decision.to_dict())
            self.last_change_step = int(step)
            self.observations = []
            self.temperature = float(temperature)
            logger.info(
                "temperature %s at step %d: %.3g -> %.3g (%s)",
                action,
                step,
                decision.previous,
                decision.temperature,
                reason,
            )
        else:
            logger.debug("temperature kept at step %d: %.3g (%s)", step, self.temperature, reason)
        return decision

    def update(self, step: int, metrics: Mapping[str, float] | None = None) -> Decision:
        """Call after step `step`'s rollout with its `diversity_metrics`; decides the next step's temperature.

        The returned decision (also `self.temperature` afterwards) applies from step + 1 on.
        """
        policy = self.cfg["policy"]
        if policy == "constant":
            return self._decide(step, "keep", self.temperature, "constant policy")
        if policy == "staged":
            target = [t for s, t in self.schedule if s <= step + 1]  # temperature for the next step
            target = target[-1] if target else self.schedule[0][1]
            if target != self.temperature:
                return self._decide(step, "set", target, f"staged schedule reaches step {step + 1}")
            return self._decide(step, "keep", target, "staged schedule")
        return self._update_diversity(step, metrics or {})

    def _update_diversity(self, step: int, metrics: Mapping[str, float]) -> Decision:
        c = self.cfg
        name = c["signal"]
        value = metrics.get(name)
        if value is None or not math.isfinite(float(value)):
            return self._decide(step, "keep", self.temperature, f"no finite {name} this step")
        value = float(value)
        if c["band"] == "relative" and self.reference is None:
            self.reference = value  # the first batch's, at the start temperature (unless the probe measured it)
        self.observations = (self.observations + [(int(step), value)])[-c["window"] :]
        if self.last_change_step is not None and step - self.last_change_step < c["min_interval"]:
            return self._decide(
                step,
                "keep",
                self.temperature,
                f"within min_interval {c['min_interval']} of the change at step {self.last_change_step}",
                value,
            )
        if len(self.observations) < c["window"]:
            return self._decide(
                step, "keep", self.temperature, f"{len(self.observations)}/{c['window']} observations", value
            )
        values = np.array([v for _, v in self.observations])
        index = self.stages.index(self.temperature)
        slope, std, mean = _slope(values), float(values.std()), float(values.mean())
        low, high = self.band()
        if values.max() < low and slope < -c["min_slope"]:
            if index + 1 < len(self.stages):
                return self._decide(
                    step,
                    "up",
                    self.stages[index + 1],
                    f"{name} below {low:.4g} for {c['window']} steps and falling (slope {slope:.4f})",
                    value,
                )
            return self._decide(
                step, "keep", self.temperature, f"{name} low and falling but already at the top stage", value
            )
        if mean > high and std > c["swing_std"]:
            if index > 0:
                return self._decide(
                    step,
                    "down",
                    self.stages[index - 1],
                    f"{name} mean {mean:.3f} above {high:.4g} and swinging (std {std:.3f} > {c['swing_std']})",
                    value,
                )
            return self._decide(
                step, "keep", self.temperature, f"{name} high and swinging but already at the bottom stage", value
            )
        return self._decide(
            step,
            "keep",
            self.temperature,
            f"{name} mean {mean:.3f}, slope {slope:.4f}, std {std:.3f}: no rule fires",
            value,
        )

    def band(self) -> tuple[float, float]:
        """The (low, high) diversity band in the signal's units: the knobs, or under band=relative
        the knobs times the start diversity (before that is measured: the knobs' multiples of 1)."""
        c = self.cfg
        scale = (self.reference or 1.0) if c["band"] == "relative" else 1.0
        return c["target_low"] * scale, c["target_high"] * scale

    def probe(self, sample_fn: Callable[[float], tuple], group_size: int, step: int = 0) -> Decision:
        """Picks the start temperature: the lowest stage whose diversity reaches the target band.

        `sample_fn(temperature) -> (tokens [N, L], lengths [N], entropy [N])` samples a probe batch
        of N // group_size prompts. Stages are tried in ascending order and the probe stops at
        the first that reaches `target_low`, so it is never far above the band unless even the
        stage below it was under it. If none reaches it, the top stage is used.
        """
        if self.cfg["policy"] != "diversity":
            raise ValueError("probe() belongs to the 'diversity' policy")
        name, low = self.cfg["signal"], self.cfg["target_low"]
        if self.cfg["band"] == "relative":  # no absolute target: measure the start temperature's diversity
            tokens, lengths, entropy = sample_fn(self.temperature)
            self.reference = float(
                diversity_metrics(np.asarray(tokens), np.asarray(lengths), group_size, entropy=np.asarray(entropy))[
                    name
                ]
            )
            self.probed = True
            low, high = self.band()
            reason = (
                f"probe {name} at {self.temperature:g}: {self.reference:.3f}; relative band [{low:.3f}, {high:.3f}]"
            )
            return self._decide(step, "probe", self.temperature, reason, self.reference)
        seen = []
        for temperature in self.stages:
            tokens, lengths, entropy = sample_fn(temperature)
            value = diversity_metrics(np.asarray(tokens), np.asarray(lengths), group_size, entropy=np.asarray(entropy))[
                name
            ]
            seen.append(f"{temperature:g}: {value:.3f}")
            if value >= low:
                break
        else:
            temperature = self.stages[-1]
        self.probed = True
        reached = value >= low
        reason = (
            f"probe {name} [{', '.join(seen)}]: lowest stage at or above {low}"
            if reached
            else f"probe {name} [{', '.join(seen)}]: no stage reaches {low}, using the top"
        )
        return self._decide(step, "probe", temperature, reason, value)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """JSON-serialisable state; the knobs are not part of it (they come from the config)."""
        return dict(
            policy=self.cfg["policy"],
            temperature=self.temperature,
            last_change_step=self.last_change_step,
            observations=[[s, v] for s, v in self.observations],
            history=[dict(d) for d in self.history],
            probed=self.probed,
            reference=self.reference,
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state["policy"] != self.cfg["policy"]:
            logger.warning(
                "restoring %s-policy scheduler state into a %s-policy scheduler", state["policy"], self.cfg["policy"]
            )
        self.temperature = float(state["temperature"])
        self.last_change_step = state["last_change_step"]
        self.observations = [(int(s), float(v)) for s, v in state["observations"]]
        self.history = [dict(d) for d in state["history"]]
        self.probed = bool(state["probed"])
        self.reference = state.get("reference")  # absent in states saved before band=relative existed
