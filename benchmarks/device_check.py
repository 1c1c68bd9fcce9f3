"""One device check for whatever accelerator JAX sees, in about 8 minutes (``--budget-s``).

In order: the tests marked ``accelerator`` (a pytest subprocess, run before this process takes the
device); the train step's tokens/s and MFU against the chip's bf16 peak (``PEAK_FLOPS`` by
``device_kind``) for Qwen3-0.6B- and 1.7B-shaped models with random weights, with the device's
memory high-water mark (``memory_stats``; a process-wide peak, so the 0.6B step runs first)
against the planner's analytic estimate (``plan.analytic.train_step``) for the same shapes; the
paged sampler's decode tokens/s for both shapes at bf16 and int8 pools, a few slot counts, skewed
(lognormal) lengths; and the judge's programs/s on the host (``judge.JudgePool`` over the
bundled reference solutions). A measurement that would start past the budget is recorded as
skipped, a failing one as its error. Prints one table and writes it as JSON (``--out``).

    python benchmarks/device_check.py                 # on the GPU/TPU machine
    python benchmarks/device_check.py --smoke         # tiny shapes on CPU (the suite runs this)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)  # the batch and length helpers of train_step.py and sample.py

# dense bf16 peak FLOP/s per chip, by a substring of jax's device_kind (first match wins)
PEAK_FLOPS = (
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("TPU v6 lite", 918e12),
    ("TPU v5 lite", 197e12),
    ("TPU v5", 459e12),
    ("TPU v4", 275e12),
)
ACCELERATOR_TESTS = ("tests/test_attention_gpu.py", "tests/test_paged_kernel_gpu.py")


def peak_flops(device_kind: str) -> float | None:
    """The chip's dense bf16 peak, or None when it is not in the table (a CPU, an unknown chip)."""
    return next((flops for name, flops in PEAK_FLOPS if name.lower() in device_kind.lower()), None)


class Budget:
    """Seconds left of the whole check; a measurement starts only if its estimate fits."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def run_tests(smoke: bool, timeout: float) -> dict:
    """pytest -m accelerator in a child process that may take the device (this one has not yet)."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if not smoke:
        env["JAX_PLATFORMS"] = ""  # tests/conftest.py would default to cpu
    # -o addopts=: setup.cfg's `--dist loadfile` would need pytest-xdist; pytest alone is enough here
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "accelerator",
        "-o",
        "addopts=",
        "-p",
        "no:cacheprovider",
        *(ACCELERATOR_TESTS[:1] if smoke else ACCELERATOR_TESTS),
    ]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        lines = (out.stdout + out.stderr).strip().splitlines()
        summary, rc = (lines or ["(no output)"])[-1], out.returncode
        if "No module named pytest" in summary:
            summary += " (pip install pytest)"
    except subprocess.TimeoutExpired:
        summary, rc = f"timed out after {timeout:.0f} s", -1
    # rc 5: every test deselected; the skips carry their reason (no GPU) in the summary line
    return dict(
        section="tests",
        name="pytest -m accelerator",
        value=summary,
        unit="",
        ok=rc in (0, 5),
        seconds=round(time.perf_counter() - start, 1),
    )


def model_configs(smoke: bool) -> dict:
    from microcoder_jax.models import DecoderConfig, get_preset

    if smoke:
        tiny = dict(
            vocab_size=256,
            intermediate_size=128,
            num_layers=1,
            num_heads=2,
            num_kv_heads=1,
            head_dim=32,
            dtype="float32",
            remat="full",
            attention="auto",
        )
        return {"tiny": DecoderConfig(hidden_size=64, **tiny)}
    return {
        name: get_preset(name, dtype="bfloat16", remat="full", attention="auto")
        for name in ("qwen3-0.6b", "qwen3-1.7b")
    }


def peak_bytes(device) -> int | None:
    stats = device.memory_stats()
    return None if not stats else int(stats.get("peak_bytes_in_use", 0)) or None


def train(name: str, mc, rows: int, seq: int, micro: int, device, peak: float | None) -> list[dict]:
    """One compiled RL train step on random weights: tokens/s, MFU, memory high-water vs the planner."""
    import jax

    from microcoder_jax import sharding
    from microcoder_jax.models import init_params
    from microcoder_jax.plan import analytic
    from microcoder_jax.plan.programs import Program, Shapes
    from microcoder_jax.rl.presets import make_rl_config
    from microcoder_jax.rl.step import init_train_state, make_train_step
    from train_step import make_batch

    cfg = make_rl_config(
        "dapo",
        truncation="none",
        group_size=rows // 2,
        num_minibatches=1,
        micro_batch_size=micro,
        logprob_chunk=min(1024, seq),
        learning_rate=1e-5,
    )
    state = init_train_state(init_params(mc, jax.random.key(0)), cfg)
    batch = jax.device_put(make_batch(rows, seq, mc.vocab_size))
    step = make_train_step(mc, cfg)
    t0 = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - t0
    state, metrics = compiled(state, batch)  # warm
    jax.block_until_ready(metrics)
    times = []
    for _ in range(2):
        t = time.perf_counter()
        state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t)
    seconds = min(times)
    mesh = sharding.make_mesh(1, 1, 1, devices=[device])
    shapes = Shapes(
        rows=rows,
        prompts=rows // 2,
        group=2,
        prompt_width=seq // 4,
        max_new=seq - seq // 4,
        micro=micro,
        step_micro=micro,  # one mini-batch (num_minibatches=1): the step's micro-batch is the pass's
        eval_prompts=0,
        eval_samples=0,
        eval_max_new=0,
        phases=1,
    )
    estimate = analytic.train_step(Program("train step", step, (state, batch), {}, mc), mesh, shapes, cfg)
    mfu = estimate.model_flops / seconds / peak if peak else None
    shape = f"{name}, {rows} rows x {seq}, micro {micro}"
    high = peak_bytes(device)
    return [
        dict(
            section="train",
            name=f"{shape}: tokens/s",
            value=round(rows * seq / seconds, 1),
            unit="tokens/s",
            compile_s=round(compile_s, 1),
            step_s=round(seconds, 4),
        ),
        dict(
            section="train",
            name=f"{shape}: MFU",
            value=None if mfu is None else round(mfu, 4),
            unit="of peak",
            note="no peak for this chip" if mfu is None else f"model FLOPs {estimate.model_flops:.3g}/step",
        ),
        dict(
            section="memory",
            name=f"{shape}: high-water / planner",
            unit="GiB",
            value=None if high is None else round(high / 2**30, 3),
            predicted=round(estimate.total / 2**30, 3),
            note="device reports no memory_stats" if high is None else "",
        ),
    ]


def decode(name: str, mc, kv_dtype: str, slots: int, cap: int, page_size: int, device) -> dict:
    """The paged sampler on random weights: G=4 samples per prompt, lognormal lengths (mean cap/3)."""
    import jax

    from microcoder_jax.models import init_params
    from microcoder_jax.sampling.paged_sampler import generate_paged
    from sample import _lognormal_lengths

    params = init_params(mc, jax.random.key(0))
    rows = 2 * slots
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, mc.vocab_size, int(n)).tolist() for n in rng.integers(16, 64, rows // 4)]
    caps = _lognormal_lengths(rows, cap)
    # tail_slots=slots: the tail does not shrink (one compiled decode program per measurement)
    kw = dict(
        num_samples=4,
        temperature=1.0,
        max_new_tokens=cap,
        stop_token_ids=[],
        pad_id=0,
        slots=slots,
        tail_slots=slots,
        page_size=page_size,
        caps=caps,
        kv_dtype=kv_dtype,
    )
    t0 = time.perf_counter()
    generate_paged(params, mc, prompts, rng=jax.random.key(1), **kw)  # compiles
    warm_s = time.perf_counter() - t0
    t = time.perf_counter()
    out = generate_paged(params, mc, prompts, rng=jax.random.key(2), **kw)
    seconds = time.perf_counter() - t
    tokens = int(np.minimum(out.lengths, caps).sum())
    return dict(
        section="decode",
        name=f"{name}, {kv_dtype} pool, {slots} slots, {rows} rows, cap {cap}",
        value=round(tokens / seconds, 1),
        unit="tokens/s",
        first_call_s=round(warm_s, 1),
        mean_length=round(float(caps.mean()), 1),
        peak_gib=None if peak_bytes(device) is None else round(peak_bytes(device) / 2**30, 3),
    )


def judge(programs: int, workers: int) -> dict:
    """Programs/s of the judge over the bundled problems' reference solutions (all should pass)."""
    from microcoder_jax.judge.pool import JudgePool
    from microcoder_jax.data.problems import load_problems

    problems = [
        p
        for p in load_problems(os.path.join(ROOT, "microcoder_jax", "data", "samples", "problems.jsonl"))
        if p.solutions
    ]
    batch = [problems[i % len(problems)] for i in range(programs)]
    pool = JudgePool(workers=workers)
    try:
        pool.judge(batch[:workers], [p.solutions[0] for p in batch[:workers]])  # servers warm
        t = time.perf_counter()
        results = pool.judge(batch, [p.solutions[0] for p in batch])
        seconds = time.perf_counter() - t
    finally:
        pool.close()
    passed = sum(r.passed for r in results)
    return dict(
        section="judge",
        name=f"{programs} reference programs, {workers} workers",
        value=round(programs / seconds, 2),
        unit="programs/s",
        passed=f"{passed}/{programs}",
    )


def print_table(rows: list[dict], header: str) -> None:
    print(header)
    print(f"{'section':<8} {'measurement':<62} {'value':>12} {'unit':<11} notes")
    for r in rows:
        value = r.get("value")
        value = "-" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
        notes = ", ".join(
            f"{k}={v}" for k, v in r.items() if k not in ("section", "name", "value", "unit") and v not in (None, "")
        )
        if len(value) > 12:  # the pytest summary line
            print(f"{r['section']:<8} {r['name']:<62} {value} {notes}")
        else:
            print(f"{r['section']:<8} {r['name']:<62} {value:>12} {r.get('unit', ''):<11} {notes}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on any backend (CPU in the suite)")
    parser.add_argument("--budget-s", type=float, default=None, help="seconds for the whole check (480; smoke 60)")
    parser.add_argument("--out", default="device_check.json", help="where the table goes as JSON")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the pytest run")
    args = parser.parse_args(argv)
    budget = Budget(args.budget_s if args.budget_s is not None else 60 if args.smoke else 480)
    rows: list[dict] = []

    def measure(estimate_s: float, label: str, fn):
        if budget.left() < estimate_s:
            rows.append(
                dict(
                    section=label.split(":")[0],
                    name=label,
                    value=None,
                    unit="",
                    note=f"skipped: {budget.left():.0f} s of the budget left, needs ~{estimate_s:.0f} s",
                )
            )
            return
        try:
            out = fn()
            rows.extend(out if isinstance(out, list) else [out])
        except Exception as e:  # one failed measurement is a row, not the end of the check
            rows.append(
                dict(
                    section=label.split(":")[0],
                    name=label,
                    value=None,
                    unit="",
                    ok=False,
                    error=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
                )
            )

    if not args.skip_tests:  # first: the child takes the device while this process has not
        measure(30, "tests: pytest -m accelerator", lambda: run_tests(args.smoke, min(150, budget.left() - 5)))

    import jax

    device = jax.devices()[0]
    peak = peak_flops(device.device_kind)
    models = model_configs(args.smoke)
    if args.smoke:
        train_shapes, decode_runs, judge_args = [(4, 32, 2)], [(8, "int8")], (4, 2)
        cap, page_size, need = 16, 8, (10, 10)
    else:
        train_shapes, decode_runs, judge_args = (
            [(8, 2048, 4)],
            [(32, "model"), (32, "int8"), (128, "model"), (128, "int8")],
            (64, min(8, os.cpu_count() or 1)),
        )
        cap, page_size, need = 256, 16, (60, 30)
    for name, mc in models.items():
        for r, s, m in train_shapes:
            measure(
                need[0],
                f"train: {name}",
                lambda mc=mc, name=name, r=r, s=s, m=m: train(name, mc, r, s, m, device, peak),
            )
    for slots, kv in decode_runs:  # every model at the first sizes before any at the next
        for name, mc in models.items():
            measure(
                need[1],
                f"decode: {name} {kv} {slots}",
                lambda mc=mc, name=name, slots=slots, kv=kv: decode(name, mc, kv, slots, cap, page_size, device),
            )
    measure(5, "judge: programs/s", lambda: judge(*judge_args))

    header = (
        f"device check: {device.platform} {device.device_kind} x{jax.device_count()}, jax {jax.__version__}, "
        f"peak {peak:.3g} FLOP/s"
        if peak
        else f"device check: {device.platform} {device.device_kind} "
        f"x{jax.device_count()}, jax {jax.__version__}, no peak FLOP/s known"
    )
    header += f"; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {os.getloadavg()[0]:.1f}"
    print_table(rows, header)
    with open(args.out, "w") as f:
        json.dump(
            {
                "header": header,
                "device_kind": device.device_kind,
                "platform": device.platform,
                "peak_flops": peak,
                "smoke": args.smoke,
                "rows": rows,
            },
            f,
            indent=1,
        )
    print(f"wrote {args.out}")
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
