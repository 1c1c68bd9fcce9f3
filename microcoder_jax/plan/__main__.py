"""`python -m microcoder_jax.plan --config CONFIG --topology v5e-8 [--config.KEY=VALUE ...]`

Sizes one RL step before a run: compiles each program (sampler prefill and decode, old log-probs,
train step, eval sampling) ahead of time for a TPU topology with libtpu (JAX_PLATFORMS=cpu, nothing
allocated) and prints memory per device against the chip's HBM, collectives inside loops, an
analytic breakdown beside XLA's figures, a roofline time estimate, and, when something does not
fit, the settings that do. GPUs and other devices: `--topology h100 --devices 8` or
`--devices N --hbm-gib X` (analytic only). `--nosearch`: report only, compile no candidates;
`--cache-dir DIR` ('' = off). Exit 0: everything fits; 1: something does not; 2: bad input.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # AOT compiles for the topology; never grab this host's chips
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # AOT only: other planners may hold libtpu too

from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from microcoder_jax.plan import programs  # noqa: E402


def _flags(argv):
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "config file (path or path:arg)", flag_values=fv)
    flags.DEFINE_string("topology", None, "v4-8, v5e-8, v5p-8, v6e-8, v5e:2x2, ... or a GPU name", flag_values=fv)
    flags.DEFINE_integer("devices", None, "devices in the run (GPUs / others: analytic only)", flag_values=fv)
    flags.DEFINE_float("hbm_gib", None, "memory per device in GiB (with --devices)", flag_values=fv)
    flags.DEFINE_string("cache_dir", programs.CACHE_DIR, "compiled-results cache ('' = off)", flag_values=fv)
    flags.DEFINE_boolean("search", True, "compile candidates for programs that do not fit", flag_values=fv)
    argv = [a.replace("--hbm-gib", "--hbm_gib").replace("--cache-dir", "--cache_dir") for a in argv]
    fv(["plan", *argv])
    return fv


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    try:
        fv = _flags(argv)
        config = fv.config
    except Exception as e:  # noqa: BLE001 - absl / the config file: report, never a traceback
        return _error(f"{str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__} "
                      "(fix the --config file or the --config.KEY=VALUE override)")
    if config is None:
        return _error("--config is required, e.g. --config configs/qwen3_4b_microcoder.py")
    if config.data.task != "demo" and not config.model.path and config.model.preset == "tiny":
        return _error("the config names no model: add --config.model.path=DIR (a Hugging Face checkpoint's "
                      "config.json) or --config.model.preset=qwen3-4b-instruct-2507 (or qwen3-1.7b)")
    from microcoder_jax.plan import planner, report
    from microcoder_jax.plan.topologies import TopologyError, parse_topology

    try:
        topology = parse_topology(fv.topology, fv.devices, fv.hbm_gib)
    except TopologyError as e:
        return _error(str(e))
    if topology.aot_name is not None:
        try:
            topology.devices()
        except Exception as e:  # noqa: BLE001
            return _error(f"cannot make TPU devices for {topology.aot_name} ({str(e).splitlines()[0][:120]}): "
                          "install libtpu with pip install 'jax[tpu]', or plan analytically with "
                          "--devices N --hbm-gib X")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        result = planner.plan(config, topology, cache_dir=fv.cache_dir or None, search=fv.search, log=log)
    except (ValueError, KeyError, OSError) as e:  # the config does not build (shapes, mesh, model)
        return _error(f"the config does not build for {topology.name}: {e}")
    print(report.render(result, config_flags.get_config_filename(fv["config"])))
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
