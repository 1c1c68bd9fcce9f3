"""The planner (`python -m microcoder_jax.plan`) on tiny configs, compiled with libtpu for v5e:2x2."""

import dataclasses
import importlib.util
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from microcoder_jax import cli
from microcoder_jax import config as config_lib
from microcoder_jax.plan import analytic, hlo, planner, programs, suggest
from microcoder_jax.plan.topologies import TopologyError, parse_topology

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "configs", "demo.py")


def _tpu_devices(name):
    try:
        return parse_topology(name).devices()
    except Exception as e:  # noqa: BLE001
        pytest.skip(
            f"libtpu cannot make AOT devices here ({str(e).splitlines()[0][:100]}); "
            "pip install 'jax[tpu]' to run the TPU compile tests"
        )


@pytest.fixture(scope="module")
def demo_plan():
    _tpu_devices("v5e:2x2")
    config = cli.load_config(DEMO, ["mesh.fsdp=-1", "train.eval_every=10"])  # (0: no eval programs planned)
    return planner.plan(config, parse_topology("v5e:2x2"), cache_dir=None, search=False)


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_demo_plan_compiles_every_program_and_fits(demo_plan):
    names = [r.program.name for r in demo_plan.rows]
    assert names == [
        "decode layout",
        "sample prefill",
        "sample decode",
        "old log-probs",
        "train step",
        "eval prefill",
        "eval decode",
    ]
    assert demo_plan.mesh_shape == {"data": 1, "fsdp": 4, "tensor": 1}
    for row in demo_plan.rows:
        assert row.error == "", row.error
        assert row.compiled.argument_bytes > 0 and row.total > 0
        assert demo_plan.verdict(row) == "fits"
    assert demo_plan.fits
    decode = demo_plan.rows[names.index("sample decode")].compiled
    # one loop per decode phase, bounded by the phase's end (+1): 4 phases up to 40 new tokens
    bounds = sorted(lp["trip_count"] for lp in decode.loops if lp["data_dependent"])
    assert bounds[-1] == 40 and len(bounds) == 4


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_report_renders_every_section(demo_plan):
    from microcoder_jax.plan import report

    text = report.render(demo_plan, "configs/demo.py")
    for part in ("== memory per device", "== analytic breakdown", "verdict: every program fits v5e:2x2"):
        assert part in text
    # seconds live in one place, the step table (with the train step's MFU and decode's tokens/s)
    assert "== time" not in text and "est. s" not in text
    from microcoder_jax.plan import lengths, timing

    config = cli.load_config(DEMO, ["mesh.fsdp=-1", "train.eval_every=10"])
    times = timing.program_times(demo_plan, config, lengths.parse("cap"))
    summary = timing.step_summary(demo_plan, config, times)
    table = "\n".join(report.step_table(times, summary, [], lengths.parse("cap")))
    assert "implied MFU" in table and "tokens/s" in table


def test_loop_collectives_and_trip_count_from_hlo():
    devices = _tpu_devices("v5e:2x2")
    mesh = jax.sharding.Mesh(devices, ("x",))
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def f(w, x):
        def body(c, _):
            full = jax.lax.with_sharding_constraint(w, rep)  # gathered every iteration
            return jnp.tanh(c @ full), None

        return jax.lax.scan(body, x, None, length=7)[0]

    args = (
        jax.ShapeDtypeStruct((256, 256), jnp.bfloat16, sharding=spec),
        jax.ShapeDtypeStruct((8, 256), jnp.bfloat16, sharding=rep),
    )
    text = jax.jit(f).lower(*args).compile().as_text()
    loops = [lp for lp in hlo.loops(text) if lp.collectives]
    assert len(loops) == 1 and loops[0].trip_count == 7 and not loops[0].data_dependent
    count, nbytes = loops[0].collectives["all-gather"]
    assert count == 1 and nbytes == 256 * 256 * 2  # the whole weight, every iteration


def test_large_copies_from_hlo():
    """A carried buffer transposed every iteration is a copy in the loop; one outside it is not counted."""
    devices = _tpu_devices("v5e:2x2")
    one = jax.sharding.SingleDeviceSharding(devices[0])
    arg = jax.ShapeDtypeStruct((2048, 2048), jnp.float32, sharding=one)
    size = 2048 * 2048 * 4

    def looped(x):
        return jax.lax.fori_loop(0, 5, lambda i, c: c.T * 1.5 + i, x)

    assert hlo.large_copies(jax.jit(looped).lower(arg).compile().as_text(), size) >= 1
    assert hlo.large_copies(jax.jit(lambda x: x.T * 2).lower(arg).compile().as_text(), size) == 0
    # a prefetch into another memory space (VMEM, S(1)) inside a loop is not a layout copy
    prefetch = """%body (p: (bf16[1920,16,128])) -> (bf16[1920,16,128]) {
  %c = (bf16[1920,16,128]{2,1,0:T(8,128)(2,1)}, bf16[1920,16,128]{2,1,0:T(8,128)(2,1)S(1)}, u32[]{:S(2)}) copy-start(%x)
}
%cond (p: (bf16[1920,16,128])) -> pred[] {
}
ENTRY %main () -> bf16[1920,16,128] {
  %w = (bf16[1920,16,128]) while(%t), condition=%cond, body=%body
}
"""
    assert hlo.large_copies(prefetch, 1) == 0
    assert hlo.large_copies(prefetch.replace("S(1)", ""), 1) == 1


# Two Qwen3-1.7B-wide layers: buffers well above the chip's on-core memory, where XLA would keep small ones
# out of HBM (the demo's tiny buffers say nothing of the model).
WIDE = [
    "mesh.fsdp=-1",
    "model.hidden_size=2048",
    "model.intermediate_size=6144",
    "model.num_layers=2",
    "model.num_heads=16",
    "model.num_kv_heads=8",
    "model.head_dim=128",
    "model.vocab_size=32768",  # a real vocabulary (the demo BPE stops at ~360 tokens)
    "model.dtype=bfloat16",
    "model.remat=full",
    "rl.micro_batch_size=8",
    "sampling.max_new_tokens=448",
    "data.prompt_buckets=(64,)",
]


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_analytic_train_step_memory_tracks_xla():
    """Two Qwen3-1.7B-wide layers (buffers well above the chip's on-core memory, where XLA would keep
    small ones out of HBM): the analytic total bounds XLA's from above, within 35%. It sums its
    terms as if all were live at once (the layer loop's gathered weights, the LM head's logits,
    the optimizer's temporaries); measured +29% since the prompt's columns skip the LM head (the
    head's input is 448 columns, not an odd 511 that XLA copied twice to lay out: then +9%)."""
    _tpu_devices("v5e:2x2")
    config = cli.load_config(DEMO, WIDE)
    result = planner.plan(config, parse_topology("v5e:2x2"), cache_dir=None, only=("train step",), search=False)
    row = result.rows[0]
    assert row.error == ""
    xla = row.compiled.total_bytes
    assert 0 <= (row.estimate.total - xla) / xla < 0.35, (row.estimate.components, xla)
    assert row.analytic_error == pytest.approx((row.estimate.total - xla) / xla)


def test_analytic_error_leaves_the_resident_state_out():
    """The analytic-vs-XLA figure compares the program alone: the train state alive beside it is the
    same figure on both sides, and adding it would shrink every program's error."""
    est = analytic.Estimate({"x": 110})
    compiled = programs.Compiled("p", 60, 40, 0, 0, 0.0, [])
    row = planner.Row(programs.Program("sample decode", None, (), {}, None), compiled, est, resident=900)
    assert row.total == 1000 and row.analytic_error == pytest.approx(0.10)
    assert planner.Row(row.program, None, est, 900).analytic_error is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine, names",
    [
        ("static", ("sample prefill", "sample decode")),
        ("paged", ("decode layout", "sample admit", "sample decode", "old log-probs")),
        ("feedback", ("sample extend",)),  # a multi-turn session's later turns (env.max_turns=2)
    ],
)
def test_analytic_memory_of_every_program_kind_tracks_xla(engine, names, tmp_path):
    """Every kind of program the planner compiles (the train step is the test above), at Qwen3-1.7B
    widths: the analytic model of the program alone is within 15% of XLA's figure."""
    _tpu_devices("v5e:2x2")
    extra = ["sampling.engine=paged", "sampling.slots=64", "model.attention=auto"] if engine != "static" else []
    extra += ["env.kind=feedback", "env.max_turns=2"] if engine == "feedback" else []
    config = cli.load_config(DEMO, WIDE + extra)
    result = planner.plan(config, parse_topology("v5e:2x2"), cache_dir=str(tmp_path), only=names, search=False)
    assert tuple(r.program.name for r in result.rows) == names
    for row in result.rows:
        assert row.error == "", row.error
        assert abs(row.analytic_error) < 0.15, (
            row.program.name,
            row.analytic_error,
            row.estimate.components,
            row.compiled.total_bytes,
        )


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_not_fitting_train_step_suggests_a_micro_batch_that_fits():
    _tpu_devices("v5e:2x2")
    config = cli.load_config(DEMO, ["mesh.fsdp=-1", "sampling.max_new_tokens=448", "data.prompt_buckets=(64,)"])
    topology = parse_topology("v5e:2x2")
    first = planner.plan(config, topology, cache_dir=None, only=("train step",), search=False)
    need = first.rows[0].total
    small = dataclasses.replace(topology, chip=dataclasses.replace(topology.chip, hbm_bytes=int(need * 0.8)))
    result = planner.plan(config, small, cache_dir=None, only=("train step",))
    assert not result.fits
    assert len(result.suggestions) == 2, result.suggestions  # the program's line, then every change together
    assert "micro-batch" in result.suggestions[0] and "fits" in result.suggestions[0], result.suggestions
    assert (
        result.suggestions[1].startswith("fits with every change")
        and "--config.rl.micro_batch_size=" in (result.suggestions[1])
    )


def test_analytic_only_plan_for_gpus():
    config = cli.load_config(DEMO, ["mesh.fsdp=-1"])
    result = planner.plan(config, parse_topology("h100", devices=8), search=False)
    assert result.mesh_shape["fsdp"] == 8
    assert all(r.compiled is None and r.estimate.total > 0 for r in result.rows)
    train = next(r for r in result.rows if r.program.name == "train step")
    assert train.estimate.seconds(result.topology.chip, 8) > 0


def test_train_step_micro_batch_is_capped_at_a_mini_batch_as_the_step_runs_it():
    """rl/step.py runs micro-batches of at most one mini-batch (rows // num_minibatches); the
    old-log-prob pass, of at most the whole batch: the planner sizes each pass by its own."""
    from microcoder_jax.config import rl_config_of

    # demo: 16 prompts x G 8 = 128 rows, 2 mini-batches of 64
    config = cli.load_config(DEMO, ["mesh.fsdp=-1", "rl.micro_batch_size=128"])
    topo = parse_topology("h100", devices=4)
    mesh = planner.abstract_mesh(config, topo.num_devices)
    sh = programs.shapes_of(config, rl_config_of(config), mesh)
    assert (sh.rows, sh.micro, sh.step_micro) == (128, 128, 64)
    capped = planner.plan(config, topo, search=False, only=("train step",)).rows[0].estimate
    config.rl.micro_batch_size = 64  # the same step: identical estimate
    same = planner.plan(config, topo, search=False, only=("train step",)).rows[0].estimate
    assert capped.total == same.total and capped.hbm_bytes == same.hbm_bytes


def test_topology_names():
    assert parse_topology("v5e-8").aot_name == "v5e:2x4"
    assert parse_topology("v4-8").num_devices == 4 and parse_topology("v4-8").aot_name == "v4:2x2x1"
    assert parse_topology("v5p-8").chip.hbm_bytes == 95 * 2**30
    assert parse_topology(None, devices=4, hbm_gib=24).aot_name is None
    with pytest.raises(TopologyError, match="unknown topology"):
        parse_topology("v9z-8")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--topology", "v9z-8"], "error: unknown topology 'v9z-8'"),
        (["--topology", "v5e-8", "--config.model.nope=1"], "error: "),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(args, message):
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, "-m", "microcoder_jax.plan", "--config", DEMO, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(message), out.stderr
    assert "Traceback" not in out.stderr


def test_estimates_count_loop_trips():
    """Decode FLOPs grow with the number of generated tokens (every step counted, not one body)."""
    config = cli.load_config(DEMO, ["mesh.fsdp=-1"])
    topo = parse_topology("h100", devices=4)
    short = planner.plan(config, topo, search=False, only=("sample decode",)).rows[0].estimate
    config.sampling.max_new_tokens = 80
    long = planner.plan(config, topo, search=False, only=("sample decode",)).rows[0].estimate
    assert 1.9 < long.flops / short.flops < 2.3
    assert isinstance(short, analytic.Estimate) and programs.Shapes


PAGED = [
    "mesh.fsdp=-1",
    "sampling.engine=paged",
    "sampling.max_new_tokens=448",
    "data.prompt_buckets=(64,)",
    "sampling.slots=64",
    "model.dtype=bfloat16",
    "model.head_dim=128",
    "model.attention=auto",
]


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_paged_engine_programs_are_planned_and_fit(tmp_path):
    """`sampling.engine=paged`: the engine's admit and run loop are compiled instead of prefill/decode."""
    _tpu_devices("v5e:2x2")
    config = cli.load_config(DEMO, PAGED)
    topology = parse_topology("v5e:2x2")
    result = planner.plan(
        config, topology, cache_dir=str(tmp_path), only=("sample admit", "sample decode"), search=False
    )
    assert [r.program.name for r in result.rows] == ["sample admit", "sample decode"]
    for row in result.rows:
        assert row.error == "", row.error
        assert result.verdict(row) == "fits"
    decode = result.rows[1]
    shape = decode.program.kwargs["shape"]
    # prompts + S sequences at the cap: 447 fed keys after up to 15 copied from a partial prompt page
    assert shape.slots == 64 and shape.num_pages == 16 * (64 // 16) + 64 * 29
    pool = decode.estimate.components["page pool (args, donated)"]
    assert pool == shape.num_pages * 16 * 2 * 2 * config.model.num_kv_heads * config.model.head_dim * 2  # bf16
    assert decode.compiled.argument_bytes >= pool  # the pool is an argument of the run loop
    # the run loop is one data-dependent while loop
    assert any(lp["data_dependent"] for lp in decode.compiled.loops)
    assert decode.compiled.kernels >= config.model.num_layers  # bf16, head_dim 128: the Pallas paged kernel
    # the loop carries the pool in the kernel's layout: no pool-sized copy per layer and step
    assert decode.compiled.large_copies == 0

    # the sampler's own mesh (decode_tensor=-1): the demo's 2 KV heads over 2 of the 4 chips and the
    # slots over the other 2, so each chip holds half the pool and half the weights
    tp = planner.plan(
        programs.with_overrides(config, **{"sampling.decode_tensor": -1}),
        topology,
        cache_dir=str(tmp_path),
        only=("sample decode",),
        search=False,
    ).rows[0]
    assert dict(tp.program.mesh.shape) == {"data": 2, "fsdp": 1, "tensor": 2}
    assert tp.estimate.components["page pool (args, donated)"] == pool // 2
    assert tp.error == "" and tp.total < decode.total, (tp.total, decode.total)
    assert tp.compiled.large_copies == 0 and tp.compiled.kernels >= config.model.num_layers

    # fewer slots hold less; a budget the 64-slot loop does not fit: the search tries the sampler's
    # mesh first (the training layout stays), then fewer slots
    half = (
        planner.plan(
            programs.with_overrides(config, **{"sampling.slots": 32}),
            topology,
            cache_dir=str(tmp_path),
            only=("sample decode",),
            search=False,
        )
        .rows[0]
        .total
    )
    assert half < decode.total, (half, decode.total)
    labels = [label for label, _ in suggest.candidates(config, "sample decode", result.mesh_shape)]
    want = ["the sampler's KV heads over every chip", "int8 KV pool, 64 slots", "int8 KV pool, 32 slots"]
    assert labels[:3] == want, labels
    hbm = int(decode.total / planner.HEADROOM * 0.98)  # just short for the 64-slot loop on the training mesh
    small = dataclasses.replace(topology, chip=dataclasses.replace(topology.chip, hbm_bytes=hbm))
    tight = planner.plan(config, small, cache_dir=str(tmp_path), only=("sample decode",))
    assert not tight.fits
    assert len(tight.suggestions) == 2 and "KV heads over every chip fits" in tight.suggestions[0], tight.suggestions
    assert "--config.sampling.decode_tensor=-1" in tight.suggestions[0]


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_paged_decode_loop_collectives_on_the_sampler_mesh(tmp_path):
    """The paged run loop on the paper's sampler mesh (data=1, fsdp=1, tensor=4: the KV heads over every
    chip, as the paper configs sample on a v5p-8), here a demo-sized model with 4 KV heads on v5e:2x2.
    Per iteration: all-reduces of the attention and MLP outputs (two per layer) plus a fixed few for
    sampling, a handful of per-slot scalar all-gathers and no weight, pool or logits gather. Measured
    (2 layers, 64 slots): 17 all-reduces of 77,056 bytes, 4 all-gathers of 2,688; 4 layers: 21, 109,824."""
    _tpu_devices("v5e:2x2")
    config = cli.load_config(DEMO, PAGED + ["sampling.decode_tensor=-1", "model.num_kv_heads=4", "model.num_heads=8"])
    row = planner.plan(
        config, parse_topology("v5e:2x2"), cache_dir=str(tmp_path), only=("sample decode",), search=False
    ).rows[0]
    assert row.error == "", row.error
    assert dict(row.program.mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 4}
    mc, slots = row.program.model_config, row.program.kwargs["shape"].slots
    (run,) = [lp for lp in row.compiled.loops if lp["data_dependent"] and lp["parent"] is None]
    gathers, gather_bytes = run["collectives"].get("all-gather", (0, 0))
    assert gathers <= 4 and gather_bytes <= slots * 64, run["collectives"]  # per-slot scalars only
    reduces, reduce_bytes = run["collectives"]["all-reduce"]
    assert 2 * mc.num_layers <= reduces <= 2 * mc.num_layers + 16, run["collectives"]
    # two bf16 [slots, hidden] outputs per layer, plus sampling's per-slot reductions (under a logits row)
    assert reduce_bytes <= 2 * mc.num_layers * slots * mc.hidden_size * 2 + slots * mc.vocab_size * 4, run
    inner = [lp for lp in row.compiled.loops if lp["parent"] == run["name"]]
    per_iteration = sum(sum(b for _, b in lp["collectives"].values()) * (lp["trip_count"] or 1) for lp in inner)
    assert per_iteration <= slots * 1024, inner  # nested loops (sampling) move per-slot scalars
    one_layer = (
        mc.hidden_size * mc.head_dim * (mc.num_heads + 2 * mc.num_kv_heads)
        + mc.num_heads * mc.head_dim * mc.hidden_size
        + 3 * mc.hidden_size * mc.intermediate_size
    ) * 2
    step = sum(b for _, b in run["collectives"].values()) + per_iteration
    assert step < one_layer, (step, one_layer)  # an iteration moves less than one layer's weights


def test_paged_dapo_counts_its_open_session_beside_the_old_logprobs():
    """A paged DAPO step scores a finished batch while refills still decode: the planner counts that
    session's pool, engine state and decode-layout weights beside the log-prob pass."""
    topology = parse_topology("h100", devices=8)
    rows = {}
    for preset in ("microcoder", "dapo"):
        config = cli.load_config(DEMO, PAGED + [f"rl.preset={preset}"])
        result = planner.plan(config, topology, only=("sample decode", "old log-probs"), search=False)
        rows[preset] = {r.program.name: r for r in result.rows}
    run = rows["dapo"]["sample decode"].program
    session = programs.local_bytes(run.args[0]) + programs.local_bytes(run.args[1])
    assert session > programs.local_bytes(run.args[0]["pool"]) > 0
    assert rows["dapo"]["old log-probs"].resident == rows["microcoder"]["old log-probs"].resident + session
    assert rows["dapo"]["sample decode"].resident == rows["microcoder"]["sample decode"].resident
    # multi-turn episodes close each generation batch's session before the batch is scored
    for preset in ("microcoder", "dapo"):
        config = cli.load_config(DEMO, PAGED + [f"rl.preset={preset}", "env.kind=feedback", "env.max_turns=2"])
        result = planner.plan(config, topology, only=("sample decode", "old log-probs"), search=False)
        rows[preset] = {r.program.name: r for r in result.rows}
    assert rows["dapo"]["old log-probs"].resident == rows["microcoder"]["old log-probs"].resident


def test_report_names_the_sampler_mesh():
    from microcoder_jax.plan import report

    config = cli.load_config(DEMO, PAGED + ["sampling.decode_tensor=-1"])
    result = planner.plan(config, parse_topology("h100", devices=8), search=False)
    header = report.render(result, "demo").splitlines()[0]
    assert "mesh data=1 fsdp=8 tensor=1; sampler mesh data=4 fsdp=1 tensor=2;" in header, header
    decode = next(r for r in result.rows if r.program.name == "sample decode")
    assert dict(decode.program.mesh.shape) == {"data": 4, "fsdp": 1, "tensor": 2}


@pytest.mark.parametrize("name", ["demo", "truncation_task"])
def test_planned_vocabulary_is_the_one_a_run_builds(name, tmp_path):
    """The demo's BPE stops short of demo.vocab_size (359 of 384 by default): the planner plans
    the model the run builds, for the demo and for the truncation task's tokenizer."""
    from microcoder_jax.trainer import setup as run_setup

    spec = importlib.util.spec_from_file_location(name, os.path.join(config_lib.config_dir(), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    run = run_setup.setup(c, str(tmp_path))
    planned = programs.model_config_for(c, False, 104).vocab_size
    assert planned == run.model_config.vocab_size == len(run.tokenizer)
    assert planned < c.demo.vocab_size
