"""The dataset pipeline on a generated dump: seconds per stage and what dedup finds.

    python benchmarks/data_pipeline.py [--distinct 5000] [--near-high 134] [--near-mid 100]
        [--verify 60] [--workers 2] [--workdir DIR]

Writes a synthetic dump in three formats (LiveCodeBench JSONL, APPS Parquet, CodeContests JSONL):
`--distinct` problems with statements of random words, plus near-duplicates of some of them with a
few words changed: `--near-high` with shingle Jaccard >= 0.8 to their original, `--near-mid` between
0.7 and 0.8 (the exact Jaccard of each planted pair is computed, so the bands are what they say).
Then times collect, process, filter (MinHash + LSH at `near_duplicate_threshold` 0.7) and export
through `stages.run_stage`, and verify separately on `--verify` problems with a reference solution
(judged by the real judge with `--workers` processes): problems/s. Prints one line per stage.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from microcoder_jax.dataset import dedup, stages  # noqa: E402

VOCAB = [
    f"{a}{b}"
    for a in ("al", "be", "ca", "do", "el", "fa", "go", "hi", "io", "ju", "ka", "lo", "mu", "no")
    for b in ("ra", "te", "mi", "so", "vu", "xe", "qi", "zo", "ny", "pa", "we", "ki")
]
SHINGLE = 5


def load_cfg(workdir: str, sources: dict):
    path = os.path.join(ROOT, "configs", "data_pipeline.py")
    spec = importlib.util.spec_from_file_location("data_pipeline_cfg", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config()
    with cfg.unlocked():
        cfg.workdir = workdir
        cfg.log_level = "WARNING"
        cfg.sources = {name: module.source(path, fmt) for name, (path, fmt) in sources.items()}
        cfg.filter.minhash_shingle = SHINGLE
    return cfg


def statement(rng: random.Random, n: int = 80) -> str:
    return "Read an integer and print it plus a constant. " + " ".join(rng.choice(VOCAB) for _ in range(n))


def near_copy(rng: random.Random, text: str, low: float, high: float) -> str | None:
    """`text` with words replaced until its shingle Jaccard to `text` falls in [low, high)."""
    words = text.split()
    for _ in range(200):
        out = list(words)
        for i in rng.sample(range(10, len(out)), rng.randint(1, 12)):
            out[i] = rng.choice(VOCAB) + "x"
        copy = " ".join(out)
        if low <= dedup.jaccard(text, copy, SHINGLE) < high:
            return copy
    return None


def lcb_row(qid: str, text: str, k: int) -> dict:
    tests = [{"input": f"{i}\n", "output": f"{i + k}\n", "testtype": "stdin"} for i in range(3)]
    return {
        "question_title": qid,
        "question_content": text,
        "platform": "atcoder",
        "question_id": qid,
        "contest_id": "c",
        "contest_date": "2023-05-06T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(tests),
        "private_test_cases": "",
        "metadata": "{}",
    }


def apps_row(pid: int, text: str, k: int) -> dict:
    io = {"inputs": [f"{i}\n" for i in range(3)], "outputs": [f"{i + k}\n" for i in range(3)]}
    return {
        "problem_id": pid,
        "question": "-----Input-----\n" + text,
        "difficulty": "interview",
        "input_output": json.dumps(io),
        "solutions": json.dumps([f"print(int(input()) + {k})\n"]),
        "starter_code": "",
        "url": f"https://example.org/{pid}",
    }


def cc_row(name: str, text: str, k: int) -> dict:
    tests = {"input": [f"{i}\n" for i in range(3)], "output": [f"{i + k}\n" for i in range(3)]}
    empty = {"input": [], "output": []}
    return {
        "name": name,
        "description": text,
        "public_tests": tests,
        "private_tests": empty,
        "generated_tests": empty,
        "source": 2,
        "difficulty": 7,
        "cf_rating": 1200,
        "solutions": {"language": [3], "solution": [f"print(int(input()) + {k})"]},
        "time_limit": {"seconds": 2, "nanos": 0},
        "memory_limit_bytes": 256 << 20,
        "input_file": "",
        "output_file": "",
        "cf_tags": [],
    }


def make_dump(root: str, distinct: int, near_high: int, near_mid: int, seed: int = 0) -> dict:
    """Three files of (distinct + planted) problems; returns the planted pairs' similarities."""
    rng = random.Random(seed)
    texts = [statement(rng) for _ in range(distinct)]
    planted = {"high": [], "mid": []}
    for band, count, (low, high) in (("high", near_high, (0.8, 1.0)), ("mid", near_mid, (0.7, 0.8))):
        while len(planted[band]) < count:
            i = rng.randrange(distinct)
            copy = near_copy(rng, texts[i], low, high)
            if copy is not None:
                planted[band].append((i, copy, dedup.jaccard(texts[i], copy, SHINGLE)))
    rows = [(f"d{i}", t) for i, t in enumerate(texts)]
    rows += [(f"n{band}{j}", copy) for band in ("high", "mid") for j, (_, copy, _) in enumerate(planted[band])]
    lcb, apps, cc = [], [], []
    for n, (qid, text) in enumerate(rows):  # originals spread over the formats; copies land anywhere
        [lcb, apps, cc][n % 3].append((n, qid, text))
    with open(os.path.join(root, "lcb.jsonl"), "w") as f:
        for n, qid, text in lcb:
            f.write(json.dumps(lcb_row(qid, text, n % 7)) + "\n")
    pq.write_table(
        pa.Table.from_pylist([apps_row(n, text, n % 7) for n, _, text in apps]), os.path.join(root, "apps.parquet")
    )
    with open(os.path.join(root, "codecontests.jsonl"), "w") as f:
        for n, qid, text in cc:
            f.write(json.dumps(cc_row(qid, text, n % 7)) + "\n")
    return {"rows": len(rows), "ids": [qid for qid, _ in rows], "planted": planted}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distinct", type=int, default=5000)
    parser.add_argument("--near-high", type=int, default=134)
    parser.add_argument("--near-mid", type=int, default=100)
    parser.add_argument("--verify", type=int, default=60, help="problems judged in the verify timing (0: skip)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args(argv)
    root = args.workdir or tempfile.mkdtemp(prefix="mc_pipeline_bench_")
    dumps = os.path.join(root, "dumps")
    os.makedirs(dumps, exist_ok=True)
    t = time.perf_counter()
    made = make_dump(dumps, args.distinct, args.near_high, args.near_mid)
    print(
        f"dump: {made['rows']} problems in 3 formats ({args.distinct} distinct, {args.near_high} planted at "
        f"Jaccard >= 0.8, {args.near_mid} at 0.7-0.8) in {time.perf_counter() - t:.1f} s; workdir {root}"
    )
    cfg = load_cfg(
        os.path.join(root, "work"),
        {
            "lcb": (os.path.join(dumps, "lcb.jsonl"), "lcb"),
            "apps": (os.path.join(dumps, "apps.parquet"), "apps"),
            "cc": (os.path.join(dumps, "codecontests.jsonl"), "codecontests"),
        },
    )
    with cfg.unlocked():
        cfg.verify.enabled = False  # timed on its own below, on a slice
    for stage in stages.STAGES:
        t = time.perf_counter()
        record = stages.run_stage(cfg, stage, force=True)
        brief = {k: v for k, v in record.items() if k in ("kept", "removed", "problems", "written", "read")}
        print(f"{stage}: {time.perf_counter() - t:.1f} s  {json.dumps(brief, default=str)[:300]}")

    def own(question_id: str) -> str:  # "lcb/d7", "cc/nhigh3", "apps/<row number>" -> the dump's id
        source, _, rest = question_id.partition("/")
        return made["ids"][int(rest)] if source == "apps" else rest

    removed = {
        own(r["question_id"]): r["rule"]
        for r in stages._read_jsonl(os.path.join(cfg.workdir, "filter", "removed.jsonl"))
    }
    for band in ("high", "mid"):
        ids = [f"n{band}{j}" for j in range(len(made["planted"][band]))]
        pairs = list(zip(ids, made["planted"][band]))
        # a pair counts as found when one of the two was removed as a near-duplicate
        found = sum(
            1
            for qid, (i, _, _) in pairs
            if removed.get(qid) == "near_duplicate" or removed.get(f"d{i}") == "near_duplicate"
        )
        sims = [s for _, _, s in made["planted"][band]]
        print(f"planted {band} ({min(sims):.2f}-{max(sims):.2f}): {found} of {len(ids)} found")
    originals = {i for band in made["planted"].values() for i, _, _ in band}
    lost = sum(1 for i in range(args.distinct) if f"d{i}" in removed and i not in originals)
    print(f"distinct problems without a planted copy removed: {lost} of {args.distinct - len(originals)}")
    if args.verify:
        from microcoder_jax.dataset import verify
        from microcoder_jax.judge.pool import JudgePool

        problems = [
            p for p in stages._read_problems(os.path.join(cfg.workdir, "filter", "problems.jsonl")) if p.solutions
        ][: args.verify]
        with JudgePool(workers=args.workers, timeout=cfg.verify.timeout, memory_mb=cfg.verify.memory_mb) as pool:
            t = time.perf_counter()
            kept, counts, _ = verify.verify_problems(
                problems, cfg.verify, pool, cache_path=None, limits=(cfg.verify.timeout, cfg.verify.memory_mb)
            )
            secs = time.perf_counter() - t
        print(
            f"verify: {len(problems)} problems in {secs:.1f} s = {len(problems) / secs:.1f} problems/s with "
            f"{args.workers} workers ({len(kept)} kept, {counts})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
