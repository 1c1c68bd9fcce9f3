"""The command-line flags of `python -m microcoder_jax.plan`, in one place for it and plan.packing."""

from __future__ import annotations

from microcoder_jax.plan import programs


def define_flags(fv) -> None:
    """The flags of `plan` beside --config (plan.packing shares them)."""
    from absl import flags

    flags.DEFINE_string("topology", None, "v4-8, v5e-8, v5p-8, v6e-8, v5e:2x2, ... or a GPU name", flag_values=fv)
    flags.DEFINE_integer("devices", None, "devices in the run (GPUs / others: analytic only)", flag_values=fv)
    flags.DEFINE_float("hbm_gib", None, "memory per device in GiB (with --devices)", flag_values=fv)
    flags.DEFINE_string("cache_dir", programs.CACHE_DIR, "compiled-results cache ('' = off)", flag_values=fv)
    flags.DEFINE_boolean("search", True, "compile candidates for programs that do not fit", flag_values=fv)
    flags.DEFINE_boolean(
        "compile",
        True,
        "compile each program for a TPU topology with libtpu; --nocompile: the analytic model only (minutes "
        "faster for large models, memory and collectives then the planner's model, not XLA's)",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "lengths",
        "cap",
        "length profile of the time: cap | paper | lognormal:MEAN,AT_CAP | run:WORKDIR (a run's metrics.jsonl)",
        flag_values=fv,
    )
    flags.DEFINE_boolean("json", False, "print the plan as one JSON object", flag_values=fv)
    flags.DEFINE_boolean("compare", False, "with --lengths=run:WORKDIR: planned vs measured per phase", flag_values=fv)
    flags.DEFINE_boolean("split", True, "also plan split rollout | learner layouts of the topology", flag_values=fv)
