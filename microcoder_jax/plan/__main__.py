"""`python -m microcoder_jax.plan --config CONFIG --topology v5e-8 [--config.KEY=VALUE ...]`

Sizes one RL step before a run: compiles each program (sampler prefill and decode, old log-probs,
train step, eval sampling) ahead of time for a TPU topology with libtpu (JAX_PLATFORMS=cpu, nothing
allocated) and prints memory per device against the chip's HBM, collectives inside loops, an
analytic breakdown beside XLA's figures, a roofline time estimate, and, when something does not
fit, the settings that do. GPUs and other devices: `--topology h100 --devices 8` or
`--devices N --hbm-gib X` (analytic only). `--nosearch`: report only, compile no candidates;
`--nocompile`: a TPU topology with the analytic model only; `--cache-dir DIR` ('' = off).
LoRA runs (`--config.lora.rank=16`, `--config.lora.base_dtype=int8`) are planned as they store and
train: the frozen base, float32 adapters and their Adam state, no base gradients.
Exit 0: everything fits; 1: something does not; 2: bad input.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # AOT compiles for the topology; never grab this host's chips
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # AOT only: other planners may hold libtpu too

from microcoder_jax import cli  # noqa: E402
from microcoder_jax.config import ConfigError  # noqa: E402
from microcoder_jax.plan.flags import define_flags as _define_flags  # noqa: E402


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    argv = [a.replace("--hbm-gib", "--hbm_gib").replace("--cache-dir", "--cache_dir") for a in argv]
    return cli.main_guard(lambda: _plan(argv))


def _plan(argv) -> int:
    helps = ("-h", "--help", "-help", "--helpfull")
    if not any(a == "--config" or a.startswith("--config=") for a in argv) and not any(a in helps for a in argv):
        raise ConfigError("--config is required, e.g. --config=configs/paper.py:qwen3-4b,microcoder")
    fv = cli.parse(
        argv, prog="python -m microcoder_jax.plan", doc=__doc__, default_file=None, define_flags=_define_flags
    )
    config = fv.config
    if config.data.task != "demo" and not config.model.path and config.model.preset == "tiny":
        raise ConfigError(
            "the config names no model: add --config.model.path=DIR (a Hugging Face checkpoint's "
            "config.json) or --config.model.preset=qwen3-4b-instruct-2507 (or qwen3-1.7b)"
        )
    from microcoder_jax.plan import lengths, planner, report, timing
    from microcoder_jax.plan.topologies import TopologyError, parse_topology

    try:
        profile = lengths.parse(fv.lengths, max_new=config.sampling.max_new_tokens)
    except lengths.LengthsError as e:
        raise ConfigError(str(e)) from None
    if fv.compare and profile.run is None:
        raise ConfigError("--compare needs --lengths=run:WORKDIR (the run whose measured times to compare)")

    try:
        topology = parse_topology(fv.topology, fv.devices, fv.hbm_gib)
    except TopologyError as e:
        raise ConfigError(str(e)) from None
    if not fv.compile:  # the analytic model on the TPU's own figures (HBM, peak, bandwidth)
        import dataclasses

        topology = dataclasses.replace(topology, aot_name=None)
    if topology.aot_name is not None:
        try:
            topology.devices()
        except Exception as e:  # noqa: BLE001
            raise ConfigError(
                f"cannot make TPU devices for {topology.aot_name} ({str(e).splitlines()[0][:120]}): "
                "install libtpu with pip install 'jax[tpu]', or plan analytically with "
                "--devices N --hbm-gib X"
            ) from None
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        result = planner.plan(config, topology, cache_dir=fv.cache_dir or None, search=fv.search, log=log)
    except (ValueError, KeyError, OSError) as e:  # the config does not build (shapes, mesh, model)
        raise ConfigError(f"the config does not build for {topology.name}: {e}") from None
    config_name = next(
        a.partition("=")[2] if a.startswith("--config=") else argv[i + 1]
        for i, a in enumerate(argv)
        if a.startswith("--config=") or a == "--config"
    )
    if not topology.chip.peak_flops:
        print(report.render(result, config_name))
        return 0 if result.fits else 1
    times = timing.program_times(result, config, profile)
    summary = timing.step_summary(result, config, times)
    splits = []
    if fv.split:
        for label, roll, learn, link in timing.split_layouts(topology, config):
            log(f"planning the split {label} (analytic) ...")
            splits.append(
                timing.split_plan(
                    config,
                    topology,
                    profile,
                    planner.plan,
                    label,
                    roll,
                    learn,
                    link,
                    summary["step_serial_s"] - summary["phases"].get("eval", {}).get("serial_s", 0.0),
                )
            )
    dropped: list = []
    cuts = timing.cuts(result, config, profile, times, summary, splits, dropped)
    if fv.json:
        import json

        print(json.dumps(report.to_json(result, times, summary, cuts, profile, splits, dropped), indent=1, default=str))
        return 0 if result.fits else 1
    print(report.render(result, config_name))
    print("\n== step time", *report.step_table(times, summary, cuts, profile, splits, dropped), sep="\n")
    if fv.compare:
        print("\n== planned vs measured", *report.compare_lines(summary, profile, topology), sep="\n")
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
