"""The planner's length profiles: the decode simulator against the paged engine's real schedule
(a tiny random model on CPU, rows stopping at their caps), and the profiles' parsing."""

import jax
import numpy as np
import pytest

from microcoder_jax.models import get_preset, init_params
from microcoder_jax.plan import decode_sim
from microcoder_jax.sampling.paged_sampler import generate_paged

G, MAX_NEW, WIDTH = 2, 24, 32
PROMPTS = [
    [5, 17, 99],
    [40, 41, 42, 43, 44, 45, 46],
    [(7 * j + 3) % 120 + 3 for j in range(32)],
    [9, 8, 7, 6, 5, 4, 3, 2, 11, 12, 13, 14, 15, 16, 17, 18, 19],
    [3] * 20,
    [4, 5],
]
ROWS = len(PROMPTS) * G
RNG = np.random.default_rng(3)
# skewed: one long row among short ones; the long rows first / last; every row at the cap; lognormal
LENGTHS = {
    "one long tail": np.array([2] * (ROWS - 1) + [MAX_NEW]),
    "long first": np.sort(RNG.integers(1, MAX_NEW + 1, ROWS))[::-1].copy(),
    "long last": np.sort(RNG.integers(1, MAX_NEW + 1, ROWS)),
    "all at cap": np.full(ROWS, MAX_NEW),
    "lognormal": np.clip(np.round(RNG.lognormal(np.log(6), 0.9, ROWS)), 1, MAX_NEW).astype(int),
}
# (slots, page_size, refill_every, tail_slots): S below the rows with a tail, and S = rows refilled every step
ENGINES = [(5, 8, 4, 1), (ROWS, 16, 1, ROWS // 2)]


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny", dtype="float32")
    return config, init_params(config, jax.random.key(0))


@pytest.mark.slow
@pytest.mark.parametrize("engine_shape", ENGINES)
def test_simulated_decode_steps_equal_the_engines(tiny, engine_shape):
    """The same slots, refill rule and lengths: the simulator's step count and slot-steps equal the
    engine's, exactly, on every length set (stop ids the model cannot sample: rows end at their caps)."""
    config, params = tiny
    slots, page_size, refill_every, tail_slots = engine_shape
    for name, caps in LENGTHS.items():
        stats = {}
        out = generate_paged(
            params,
            config,
            PROMPTS,
            num_samples=G,
            temperature=1.0,
            max_new_tokens=MAX_NEW,
            stop_token_ids=[config.vocab_size + 7],
            pad_id=0,
            rng=jax.random.key(1),
            slots=slots,
            page_size=page_size,
            refill_every=refill_every,
            tail_slots=tail_slots,
            caps=caps.astype(np.int32),
            prompt_buckets=(WIDTH,),
            stats=stats,
        )
        np.testing.assert_array_equal(out.lengths, caps)
        sim = decode_sim.simulate(
            caps,
            [len(p) for p in PROMPTS],
            group=G,
            slots=slots,
            page_size=page_size,
            refill_every=refill_every,
            tail_slots=tail_slots,
            max_new=MAX_NEW,
            prompt_width=WIDTH,
            block=max(1, 64 // page_size) * page_size,  # PagedSession's default block_pages
        )
        assert sim.steps == stats["steps"], (name, engine_shape, sim.steps, stats)
        assert int(sim.own_keys.sum()) == stats["own_reads"], (name, engine_shape)  # a paged kernel's reads
        assert sim.slot_steps == stats["slot_steps"], (name, engine_shape, sim.slot_steps, stats)
        assert int(sim.live.sum()) == stats["live_slot_steps"], (name, engine_shape)


def test_simulator_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="lengths"):
        decode_sim.simulate([3, 4, 5], [4, 4], group=2, slots=2)


# ------------------------------------------------------------------ the step table, JSON, run:, splits

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from microcoder_jax import cli  # noqa: E402
from microcoder_jax.plan import hlo, lengths, planner, programs, timing  # noqa: E402
from microcoder_jax.plan.topologies import TopologyError, parse_topology  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "configs", "demo.py")
LOOP_HLO = """%body (p: (s32[], bf16[256,256])) -> (s32[], bf16[256,256]) {
  %ag = bf16[1024,256]{1,0} all-gather(bf16[256,256]{1,0} %w), dimensions={0}
  %ar = f32[64]{0} all-reduce(f32[64]{0} %x), to_apply=%add
}
%cond (p: (s32[], bf16[256,256])) -> pred[] {
  %c = s32[] constant(5)
}
ENTRY %main () -> bf16[256,256] {
  %w = (s32[], bf16[256,256]) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
}
"""


def test_collective_time_is_bytes_over_the_link_bandwidth():
    """A hand-built loop: 5 trips of a bf16[1024,256] all-gather and an f32[64] all-reduce; its time is
    the bytes over v5e's ICI (200 GB/s one way); on two slices half of it crosses DCN."""
    loops = [dataclasses.asdict(lp) for lp in hlo.loops(LOOP_HLO)]
    nbytes = 5 * (1024 * 256 * 2 + 64 * 4)
    compiled = programs.Compiled("p", 1, 1, 0, 0, 0.0, loops)
    row = planner.Row(programs.Program("sample decode", None, (), {}, None), compiled, None, 0)
    assert timing._collective_bytes(row, None, None, None) == nbytes
    one = parse_topology("v5e-8")
    assert one.chip.ici_bandwidth == 200e9
    assert timing._link(one, nbytes) == pytest.approx(nbytes / 200e9)
    two = parse_topology("v5e-8x2")
    assert two.slices == 2 and two.num_devices == 16
    assert timing._link(two, nbytes) == pytest.approx(nbytes / 2 / 200e9 + nbytes / 2 / two.chip.dcn_bandwidth)
    t = timing.ProgramTime("x", 2, compute_s=1.0, hbm_s=3.0, collective_s=2.5, collective_bytes=nbytes)
    assert t.serial_s == pytest.approx(2 * 5.5) and t.overlapped_s == pytest.approx(2 * 3.0) and t.bound == "HBM"


import dataclasses  # noqa: E402


def _main(argv, capsys):
    from microcoder_jax.plan.__main__ import main

    code = main(argv)
    return code, capsys.readouterr()


def test_json_output_schema(capsys):
    code, out = _main(
        [
            "--config",
            DEMO,
            "--topology",
            "h100",
            "--devices",
            "4",
            "--json",
            "--lengths",
            "paper",
            "--config.mesh.fsdp=-1",
        ],
        capsys,
    )
    assert code == 0
    plan = json.loads(out.out)
    assert set(plan) >= {"topology", "mesh", "fits", "lengths", "programs", "step", "cuts", "splits", "suggestions"}
    assert plan["lengths"] == "paper" and plan["topology"]["ici_bandwidth"] == 900e9
    for p in plan["programs"]:
        assert set(p) >= {
            "name",
            "total_bytes",
            "verdict",
            "compute_s",
            "hbm_s",
            "collective_s",
            "serial_s",
            "overlapped_s",
            "bound",
        }
        assert p["serial_s"] >= p["overlapped_s"] >= 0 and p["bound"] in ("compute", "HBM", "ICI")
    step = plan["step"]
    assert step["step_serial_s"] >= step["step_overlapped_s"] > 0
    assert abs(sum(ph["share"] for ph in step["phases"].values()) - 1) < 1e-6
    savings = [c["saving_s"] for c in plan["cuts"]]
    assert savings == sorted(savings, reverse=True)


def test_paper_lengths_plan_a_shorter_step_than_cap():
    config = cli.load_config(DEMO, ["mesh.fsdp=-1", "sampling.engine=paged", "sampling.slots=8"])
    result = planner.plan(config, parse_topology("h100", devices=4), search=False)
    cap, paper = (
        timing.step_summary(result, config, timing.program_times(result, config, lengths.parse(x)))
        for x in ("cap", "paper")
    )
    assert paper["phases"]["sampling"]["serial_s"] < cap["phases"]["sampling"]["serial_s"]
    assert paper["phases"]["train"]["serial_s"] == pytest.approx(cap["phases"]["train"]["serial_s"])  # padded


def _fake_run(path, rows=5):
    """A demo-shaped run directory: config.json and metrics.jsonl rows as the trainer writes them."""
    config = cli.load_config(DEMO, [])
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config.to_dict(), f, default=str)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for i in range(rows):
            f.write(
                json.dumps(
                    {
                        "step": i,
                        "response_length_mean": 12.0,
                        "truncation_rate": 0.1,
                        "rows": 16,
                        "train_tokens": 16 * 30,
                        "gen_tokens": 16 * 12,
                        "time_sample_s": 0.4,
                        "time_train_s": 0.5,
                        "time_step_s": 1.9,
                        "time_judge_s": 0.7,
                    }
                )
                + "\n"
            )
        f.write('{"step": 5, "respo')  # a row cut by a crash is skipped
    return config


def test_run_lengths_read_a_runs_metrics(tmp_path):
    config = _fake_run(str(tmp_path))
    profile = lengths.parse(f"run:{tmp_path}")
    assert profile.run["steps"] == 5 and profile.run["prompt_length_mean"] == pytest.approx(18.0)
    assert profile.response_mean == pytest.approx(12.0 / config.sampling.max_new_tokens)
    assert profile.run["times"]["time_step_s"] == pytest.approx(1.9)
    with pytest.raises(lengths.LengthsError, match="no metrics.jsonl"):
        lengths.parse(f"run:{tmp_path}/nope")
    with pytest.raises(lengths.LengthsError, match="lognormal:MEAN,AT_CAP"):
        lengths.parse("lognormal:0.5")


def test_compare_marks_a_cpu_run_not_comparable(tmp_path, capsys):
    _fake_run(str(tmp_path))
    code, out = _main(
        [
            "--config",
            DEMO,
            "--topology",
            "h100",
            "--devices",
            "4",
            f"--lengths=run:{tmp_path}",
            "--compare",
            "--config.mesh.fsdp=-1",
        ],
        capsys,
    )
    assert code == 0
    text = out.out.split("== planned vs measured")[1]
    assert "sample" in text and "0.40" in text and "1.90" in text
    assert "not comparable" in text


def test_split_layouts_and_the_pipelined_step():
    assert [x[0] for x in timing.split_layouts(parse_topology("v5e-8"))] == ["v5e-8 as 4+4 chips"]
    assert timing.split_layouts(parse_topology("v5p-16"))[0][1].name == "v5p-8"
    assert timing.split_layouts(parse_topology("v5e-8x2"))[0][3] == "DCN"
    config = cli.load_config(DEMO, ["mesh.fsdp=-1", "sampling.engine=paged", "sampling.slots=8"])
    label, roll, learn, link = timing.split_layouts(parse_topology("v5e-8"))[0]
    s = timing.split_plan(
        config,
        parse_topology("v5e-8"),
        lengths.parse("paper"),
        planner.plan,
        label,
        roll,
        learn,
        link,
        synchronous_s=1e-9,
    )
    assert s["pipelined_s"] == pytest.approx(max(s["rollout"]["seconds"], s["learner"]["seconds"]) + s["transfer_s"])
    assert s["transfer_s"] == pytest.approx(s["transfer_bytes_per_chip"] / 200e9)
    assert s["recommend"] == "synchronous"  # a split that cannot beat the synchronous step says so
    # the config's own split (H30's mesh.rollout_devices: a count, or a fraction of the devices)
    from ml_collections import ConfigDict

    own = ConfigDict({"mesh": {"rollout_devices": 0.25}})
    assert timing.rollout_devices(own, 8) == 2
    ((label, roll, learn, link),) = timing.split_layouts(parse_topology("v5e-8"), own)
    assert (roll.num_devices, learn.num_devices, link) == (2, 6, "ICI") and "mesh.rollout_devices" in label


def test_topology_validation_and_single_chips():
    with pytest.raises(TopologyError, match="v5p slices are v5p-8, v5p-16"):
        parse_topology("v5p-9")
    with pytest.raises(TopologyError, match="v5e-1, v5e-4, v5e-8"):
        parse_topology("v5e-3")
    for name in ("v5e-1", "v6e-1"):
        t = parse_topology(name)
        assert t.num_devices == 1 and t.aot_name.endswith(":1x1")
        try:
            assert len(t.devices()) == 1
        except RuntimeError as e:  # no libtpu: the name still parses
            pytest.skip(str(e)[:100])


def test_plan_help_needs_no_config():
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, "-m", "microcoder_jax.plan", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "--lengths" in out.stdout and "rl.micro_batch_size" in out.stdout


def _notebook_flags(cell_marker):
    """The --config.* flags of the notebook cell whose source holds `cell_marker` (model.path -> preset)."""
    import re

    with open(os.path.join(ROOT, "launch", "colab_tpu.ipynb")) as f:
        cells = ["".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    src = next(c for c in cells if cell_marker in c)
    flags = re.findall(r"--config\.([\w.]+)=([^\s\"]+)", src)
    out = ["model.preset=qwen3-0.6b" if k == "model.path" else f"{k}={v}" for k, v in flags]
    return ["model.preset=qwen3-0.6b"] + [f for f in out if not f.startswith("model.preset")]


@pytest.mark.parametrize("topology", ["v5e-1", "v6e-1"])
def test_colab_notebook_tpu_cells_fit_one_chip(topology):
    """The notebook's Qwen3-0.6B cells (eval, then a short train run) fit one chip, analytically
    (within 15% of XLA per program kind, tests/test_plan.py)."""
    paper = os.path.join(ROOT, "configs", "paper.py:qwen3-1.7b,microcoder")
    train = cli.load_config(paper, _notebook_flags("microcoder_jax.train --config=configs/paper"))
    result = planner.plan(train, parse_topology(topology), search=False, compile_=False)
    assert not any(r.program.name.startswith("eval") for r in result.rows)  # train.eval_every=0
    assert result.fits, [(r.program.name, r.total / 2**30) for r in result.rows]
    ev = cli.load_config(paper, _notebook_flags("qwen3_0p6b_eval"))
    result = planner.plan(
        ev, parse_topology(topology), search=False, compile_=False, only=("eval admit", "eval decode")
    )
    assert len(result.rows) == 2 and result.fits, [(r.program.name, r.total / 2**30) for r in result.rows]


def test_partial_recompute_is_planned_as_a_prefill_of_every_slot_at_full_width():
    from microcoder_jax.plan import analytic

    overrides = ["mesh.fsdp=-1", "sampling.engine=paged", "sampling.slots=8", "train.partial_rollouts=true"]
    got = {}
    for recompute in (False, True):
        config = cli.load_config(DEMO, [*overrides, f"train.partial_recompute={recompute}"])
        result = planner.plan(config, parse_topology("h100", devices=4), search=False)
        times = timing.program_times(result, config, lengths.parse("paper"))
        got[recompute] = ({t.name: t for t in times}, timing.step_summary(result, config, times))
    names, summary = got[True]
    assert "sample recompute" not in got[False][0]
    row = names["sample recompute"]
    decode = next(r.program for r in result.rows if r.program.name == "sample decode")
    shape = decode.kwargs["shape"]
    _, _, tokens = analytic.recompute(
        decode.model_config, shape.slots, shape.prompt_width, shape.max_new, shape.max_prompts
    )
    assert tokens == shape.slots * (shape.prompt_width + shape.max_new) + shape.max_prompts * shape.prompt_width
    assert f"{tokens:,} tokens" in row.note and row.serial_s > 0
    added = summary["phases"]["sampling"]["serial_s"] - got[False][1]["phases"]["sampling"]["serial_s"]
    assert added == pytest.approx(row.serial_s)


def test_multi_turn_sampling_is_planned_at_the_session_the_episodes_open():
    """env.max_turns = T on the paged engine: admit, decode and extend are planned at the shape
    HeldTurns opens (its prompt width the widest turn's, its pool every row's context); the time
    decodes T turns and extends T - 1 of them. On the static engine the later turns are fresh
    calls over the whole context ("turn prefill", "turn decode"), T - 1 a step."""
    from microcoder_jax.sampling.paged_sampler import extend_block, held_session_pages
    from microcoder_jax.trainer.episodes import turn_widths

    base = ["mesh.fsdp=-1", "sampling.slots=8", "env.kind=feedback", "env.feedback_tokens=64"]
    sampling, step = {}, {}
    for engine in ("paged", "static"):
        for turns in (1, 2, 3):
            config = cli.load_config(DEMO, [*base, f"sampling.engine={engine}", f"env.max_turns={turns}"])
            result = planner.plan(config, parse_topology("h100", devices=4), search=False)
            times = {t.name: t for t in timing.program_times(result, config, lengths.parse("paper"))}
            progs = {r.program.name: r.program for r in result.rows}
            sampling[engine, turns] = timing.step_summary(result, config, list(times.values()))["phases"]["sampling"]
            step[engine, turns] = times
            if turns == 1:
                assert not {"sample extend", "turn prefill", "turn decode"} & set(progs)
                continue
            blocks = [config[b] for b in ("data", "sampling", "env")]
            widest, rows = max(turn_widths(*blocks)), 16 * 8
            if engine == "paged":
                shape = progs["sample decode"].kwargs["shape"]
                assert (
                    shape.hold and shape.prompt_width == widest == progs["sample extend"].kwargs["shape"].prompt_width
                )
                assert shape.num_pages == held_session_pages(16, 64, rows, widest, 40, 16)
                assert shape.max_prompts == 16 + rows * (turns - 1)
                block, chunk = progs["sample extend"].args[3].shape
                assert block == extend_block(widest, 64, rows // 16) and chunk == 16 * -(-65 // 16)
                assert times["sample extend"].calls == (turns - 1) * -(-rows // block)
                assert f"env.max_turns={turns}" in times["sample decode"].note
            else:
                assert progs["turn prefill"].args[1].shape == (rows, widest)  # one answer per row's context
                assert times["turn prefill"].calls == times["turn decode"].calls == turns - 1
    for engine in ("paged", "static"):  # each turn adds sampling work
        assert sampling[engine, 1]["serial_s"] < sampling[engine, 2]["serial_s"] < sampling[engine, 3]["serial_s"]
    # the learner's rows are the same episodes whatever the engine
    assert step["paged", 3]["train step"].compute_s == pytest.approx(step["static", 3]["train step"].compute_s)


def test_episodes_in_flight_size_the_held_pool_and_the_search_offers_them():
    """sampling.episodes_in_flight = M: the planned session holds M episodes (its pool and slots
    sized for them, not for every row), whole groups of G; the search offers halving M before
    fewer prompts, keeping the batch."""
    from microcoder_jax.plan import suggest
    from microcoder_jax.sampling.paged_sampler import held_session_pages
    from microcoder_jax.trainer.episodes import turn_widths

    base = ["mesh.fsdp=-1", "env.kind=feedback", "env.max_turns=2", "sampling.engine=paged"]
    shapes = {}
    for m in (0, 20, 3):
        config = cli.load_config(DEMO, [*base, f"sampling.episodes_in_flight={m}"])
        plan = planner.plan(config, parse_topology("h100", devices=4), only=("sample decode",), search=False)
        shapes[m] = plan.rows[0].program.kwargs["shape"]
    widest, rows, g = max(turn_widths(*[config[b] for b in ("data", "sampling", "env")])), 16 * 8, 8
    for m, held in ((0, rows), (20, 16), (3, g)):  # every row; whole groups; at least one group
        assert shapes[m].num_pages == held_session_pages(16, 64, held, widest, 40, 16), m
        assert shapes[m].slots == min(held, 128)
    options = [c for _, c in suggest.candidates(config, "sample decode", {"data": 1, "fsdp": 4, "tensor": 1})]
    flying = [c["sampling.episodes_in_flight"] for c in options if "sampling.episodes_in_flight" in c]
    assert flying == [] and {"data.num_prompts": 8} in options  # M = G: nothing smaller to offer
    config = cli.load_config(DEMO, base)
    options = [c for _, c in suggest.candidates(config, "sample decode", {"data": 1, "fsdp": 4, "tensor": 1})]
    keys = [next(iter(c)) for c in options]
    assert [c["sampling.episodes_in_flight"] for c in options if "sampling.episodes_in_flight" in c] == [64, 32, 16, 8]
    assert keys.index("sampling.episodes_in_flight") < keys.index("data.num_prompts")


def test_search_for_a_later_turn_plans_the_engine_switch_under_the_program_doing_its_work():
    """A later turn's programs on the static engine: the search offers fewer prompts a step (the
    rollout batch's, not the eval batch's) and the paged engine, whose session does that work as
    "sample decode" / "sample extend"; a candidate's size is read off the program doing the work,
    never off another row of the same plan."""
    from microcoder_jax.plan import suggest

    base = ["mesh.fsdp=-1", "env.kind=feedback", "env.max_turns=2"]
    static = cli.load_config(DEMO, [*base, "sampling.engine=static"])
    mesh = {"data": 1, "fsdp": 4, "tensor": 1}
    options = dict(suggest.candidates(static, "turn decode", mesh))
    assert any(c.get("sampling.engine") == "paged" for c in options.values())
    assert {"data.num_prompts": 8} in options.values() and not any("eval.batch_problems" in c for c in options.values())
    held = cli.load_config(DEMO, [*base, "sampling.engine=paged", "sampling.slots=8"])
    assert {"data.num_prompts": 8} in dict(suggest.candidates(held, "sample decode", mesh)).values()  # a smaller pool
    topo = parse_topology("h100", devices=4)
    for config, name, planned in ((static, "turn decode", "turn decode"), (held, "turn decode", "sample decode")):
        both = planner.plan(config, topo, only=suggest._names(name), search=False)
        assert len(both.rows) == (2 if config is static else 1)  # the static plan holds both programs
        assert [r.program.name for r in suggest._program(both, name).rows] == [planned]
