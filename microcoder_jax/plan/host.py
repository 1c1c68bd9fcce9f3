"""The memory check a run makes before its first step on the host's own CPU devices: the planner's
analytic model of every program of one RL step (`planner.plan`, no compile), its peak times the
devices the mesh uses, against the memory available now. On TPUs and GPUs `python -m
microcoder_jax.plan` (and `launch/`) plan ahead of time instead."""

from __future__ import annotations

import math
import os

GIB = 1 << 30
# XLA's CPU backend keeps more alive than the planner's model of a fused accelerator program: the
# SmolLM2-135M train step of configs/smollm2.py peaked at 15.4 GiB resident against 11.1 GiB
# estimated (micro-batch 4), and was killed past 23.2 GiB against 19.2 (micro-batch 8). The check
# refuses what the estimate times this margin does not leave room for.
CPU_MARGIN = 1.4
# What cuts the estimate, in the order a user would try (the train step is usually the peak).
KNOBS = (
    "data.num_prompts (prompts per step)",
    "sampling.group_size (samples per prompt)",
    "sampling.max_new_tokens",
    "rl.micro_batch_size (rows per forward/backward)",
    "data.prompt_buckets / data.max_prompt_tokens",
)
LORA_KNOB = "lora.rank=16 (adapters instead of full fine-tuning: no fp32 master or Adam state of the base)"


def knobs(config) -> tuple:
    """KNOBS, and LoRA last for a full fine-tuning run (it changes what is trained)."""
    lora = config.get("lora")
    return KNOBS + ((LORA_KNOB,) if lora is not None and not lora.rank else ())


def available_bytes() -> int | None:
    """Memory available to a new process now: /proc/meminfo's MemAvailable, else the free pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimate(config, devices: int) -> tuple[int, str]:
    """(bytes, program): the largest program of one RL step (with the state resident beside it) on
    the run's mesh over `devices` host devices, summed over the devices the mesh uses. A LoRA run
    (`lora.rank` > 0) is planned as it stores its state: the base in the compute dtype or int8,
    float32 adapters and their Adam moments only."""
    from microcoder_jax.plan import planner
    from microcoder_jax.plan.topologies import parse_topology

    mesh = planner.abstract_mesh(config, devices)
    used = math.prod(mesh.shape.values())
    topology = parse_topology(None, used, 1 << 20)  # analytic only: the HBM figure is not used here
    result = planner.plan(config, topology, compile_=False, search=False)
    row = max(result.rows, key=lambda r: r.total)
    return row.total * used, row.program.name


def check(config, log_fn=print) -> None:
    """On a CPU backend: log the estimate in one line, and refuse (ConfigError naming the knobs
    that cut it) when it exceeds the memory available, unless train.ignore_memory_check."""
    import jax

    from microcoder_jax.blocks import ConfigError

    if jax.default_backend() != "cpu":
        return
    need, program = estimate(config, jax.local_device_count())
    have = available_bytes()
    shown = f"{have / GIB:.1f} GiB available" if have else "available memory unknown"
    log_fn(
        f"memory estimate: {need / GIB:.2f} GiB at the peak ({program}; the planner's model), "
        f"{CPU_MARGIN * need / GIB:.1f} GiB with the CPU margin (x{CPU_MARGIN}), {shown}"
    )
    if have is None or CPU_MARGIN * need <= have or config.train.ignore_memory_check:
        return
    raise ConfigError(
        f"memory estimate {need / GIB:.1f} GiB ({program}; {CPU_MARGIN * need / GIB:.1f} GiB with the CPU "
        f"margin x{CPU_MARGIN}: XLA on a CPU keeps more alive than the model counts) exceeds the "
        f"{have / GIB:.1f} GiB available: "
        f"the run would be killed for memory. Cut {', '.join(knobs(config))} "
        f"(`python -m microcoder_jax.plan --config=... --devices 1 --hbm-gib {have / GIB:.0f}` shows each "
        "program), or start anyway with --config.train.ignore_memory_check=True"
    )
