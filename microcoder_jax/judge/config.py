"""`JudgeConfig`: the `judge.*` block (the judge pool's size, limits and reward)."""

from __future__ import annotations

import dataclasses

from microcoder_jax.blocks import Block, knob


@dataclasses.dataclass(frozen=True)
class JudgeConfig(Block):
    PREFIX = "judge"

    workers: int = knob(0, "judge processes (0 = number of CPU cores)", at_least=0)
    timeout: float = knob(6.0, "CPU seconds per test (wall-clock backstop 3x)", at_least=1e-3)
    memory_mb: int = knob(1024, "address-space limit per program, MiB", at_least=1)
    reward: str = knob(
        "all",
        "a registered reward (judge/rewards.py): all (1 iff every test passes), fraction (tests "
        "passed / total), or one added with register_reward",
    )
    server_retries: int = knob(
        2,
        "fresh fork servers a test is retried on after its server died from "
        "outside (OOM killer, operator); then judge_error, left out of rewards",
        at_least=0,
    )

    def check(self) -> None:
        from microcoder_jax.judge.rewards import REWARDS

        if self.reward not in REWARDS:
            self.fail(
                "reward",
                self.reward,
                f"registered rewards: {', '.join(sorted(REWARDS))} (register one with "
                "microcoder_jax.judge.rewards.register_reward, imported before the config is checked)",
            )


def open_pool(cfg: JudgeConfig, hide=()):
    """The judge pool this block describes; `hide`: files programs must not read (the problem files)."""
    from microcoder_jax.judge.pool import JudgePool

    return JudgePool(
        workers=cfg.workers or None,
        timeout=cfg.timeout,
        memory_mb=cfg.memory_mb,
        hide=hide,
        server_retries=cfg.server_retries,
    )
