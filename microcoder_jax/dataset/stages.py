"""The stage runner: collect -> process -> filter -> verify -> export, resumable and atomic.

Each stage reads the previous stage's directory under `workdir` and builds its own in a temporary
directory, writes `_DONE.json` (counts + a fingerprint of its config and inputs) last, and then
renames it into place, so a stage directory either is complete or does not exist. A rerun skips a
stage whose `_DONE.json` carries the same fingerprint; a changed config or input changes the
fingerprint and rebuilds that stage and everything after it; `force` rebuilds regardless.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import random
import shutil
import time
from typing import Callable, Iterator

from microcoder_jax.data.jsonl import BadLine, read_jsonl
from microcoder_jax.dataset import collect, filters, process, report, verify
from microcoder_jax.dataset.drops import Drops
from microcoder_jax.data.problems import Problem, load_problems

log = logging.getLogger(__name__)

STAGES = ("collect", "process", "filter", "verify", "export")
DONE = "_DONE.json"


def sources_of(cfg) -> list[dict]:
    """Configured sources in dedup-priority order (lower `priority` first, then name)."""
    items = [dict(v, name=k) for k, v in cfg.sources.items()]
    return sorted(items, key=lambda s: (s.get("priority", 100), s["name"]))


def stage_done(workdir: str, stage: str) -> dict | None:
    """The `_DONE.json` record of a finished stage, or None."""
    path = os.path.join(workdir, stage, DONE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _fingerprint(*parts) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _file_stats(paths) -> list:
    return [(p, os.path.getsize(p), os.path.getmtime(p)) for p in paths if p and os.path.isfile(p)]


def _source_files(cfg) -> list:
    """(path, size, mtime) of every input file, so a changed dump re-collects."""
    files = []
    for s in sources_of(cfg):
        if s.get("format") == "dir":
            walked = sorted(os.path.join(r, f) for r, _, fs in os.walk(s["path"]) for f in fs)
            files += _file_stats(walked)
        else:
            files += _file_stats(collect.row_files(s["path"]))
    return files


class _StageDir:
    """A temporary stage directory that replaces the real one only when `commit` is called.
    Leftovers of a crashed run (`.<stage>.tmp-*`, `.<stage>.old-*`) are removed on creation: one
    pipeline at a time per workdir."""

    def __init__(self, workdir: str, stage: str):
        for name in os.listdir(workdir):
            if name.startswith((f".{stage}.tmp-", f".{stage}.old-")):
                shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
        self.final = os.path.join(workdir, stage)
        self.path = os.path.join(workdir, f".{stage}.tmp-{os.getpid()}")
        self._old = os.path.join(workdir, f".{stage}.old-{os.getpid()}")
        os.makedirs(self.path)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def commit(self, record: dict) -> None:
        with open(self.file(DONE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(self.final):
            os.replace(self.final, self._old)  # a crash right here leaves the stage not done
        os.replace(self.path, self.final)
        shutil.rmtree(self._old, ignore_errors=True)

    def abandon(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _read_jsonl(path: str) -> Iterator[dict]:
    """A stage's own output: every line is valid JSON (a bad one means a damaged workdir)."""
    for index, row in read_jsonl(path):
        if isinstance(row, BadLine):
            raise ValueError(f"{path}:{index + 1}: invalid JSON ({row.error}); rebuild with --force")
        yield row


def _write_jsonl(path: str, rows) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def _read_problems(path: str) -> Iterator[Problem]:
    return (Problem.from_json(row) for row in _read_jsonl(path))


# ---------------------------------------------------------------------------------------------
# stages: each takes (cfg, out: _StageDir, **kw) and returns the counts for _DONE.json


def run_collect(cfg, out: _StageDir, **_) -> dict:
    per_source = {}
    drops = Drops("collect")

    def records():
        for source in sources_of(cfg):
            stats: dict = {}
            yield from collect.iter_source(source, stats, drops)  # a missing source path fails the stage
            per_source[source["name"]] = stats
            log.info("collected %s: %s", source["name"], stats)

    total = _write_jsonl(out.file("rows.jsonl"), records())
    dropped = sum(n for per in drops.counts.values() for n in per.values())
    return {"rows": total, "dropped": dropped, "per_source": per_source}


def run_process(cfg, out: _StageDir, **_) -> dict:
    """Records -> problems; per source the problems made and the rows dropped, by reason."""
    per_source: dict[str, dict] = {}
    seen_ids: set[str] = set()
    drops = Drops("process")

    def problems():
        for record in _read_jsonl(os.path.join(cfg.workdir, "collect", "rows.jsonl")):
            source, origin = record["source"], record.get("origin", "")
            stats = per_source.setdefault(source, {"problems": 0})
            try:
                problem = process.to_problem(record, cfg.process.max_solutions)
            except Exception as e:  # noqa: BLE001 - one bad row never stops the stage
                drops.error(source, origin, e)
                continue
            if problem.question_id in seen_ids:
                drops.add(source, "duplicate_id", origin, problem.question_id)
                continue
            seen_ids.add(problem.question_id)
            stats["problems"] += 1
            yield problem.to_json()

    total = _write_jsonl(out.file("problems.jsonl"), problems())
    for source, stats in per_source.items():
        if drops.of(source):
            stats["dropped"] = drops.of(source)
    drops.log()
    dropped = sum(n for per in drops.counts.values() for n in per.values())
    return {"problems": total, "dropped": dropped, "per_source": per_source}


def resolve_pass_rate_fn(cfg) -> filters.PassRateFn | None:
    """The live pass-rate callable named by `filter.difficulty.pass_rate_fn` ("module:factory";
    the factory is called with `pass_rate_fn_kwargs` and returns `fn(problems) -> rates`)."""
    spec = cfg.filter.difficulty.pass_rate_fn
    if not spec:
        return None
    module, _, name = spec.partition(":")
    factory = getattr(importlib.import_module(module), name)
    return factory(**cfg.filter.difficulty.pass_rate_fn_kwargs.to_dict())


def run_filter(cfg, out: _StageDir, pass_rate_fn=None, **_) -> dict:
    eval_problems = []
    for path in [p for p in cfg.filter.eval_problems.split(",") if p.strip()]:
        eval_problems += load_problems(path.strip(), skip_malformed=True)
    if pass_rate_fn is None and cfg.filter.difficulty.enabled:
        pass_rate_fn = resolve_pass_rate_fn(cfg)
    kept, counts, removed = filters.filter_problems(
        _read_problems(os.path.join(cfg.workdir, "process", "problems.jsonl")),
        cfg.filter,
        eval_problems=eval_problems,
        pass_rate_fn=pass_rate_fn,
    )
    _write_jsonl(out.file("problems.jsonl"), (p.to_json() for p in kept))
    _write_jsonl(out.file("removed.jsonl"), ({"question_id": q, "rule": r} for q, r in removed.items()))
    capped = sum(bool(p.metadata.get("tests_capped")) for p in kept)
    return {"kept": len(kept), "removed": counts, "tests_capped": capped, "eval_problems": len(eval_problems)}


def _make_pool(cfg):
    from microcoder_jax.judge.pool import JudgePool

    return JudgePool(workers=cfg.verify.workers or None, timeout=cfg.verify.timeout, memory_mb=cfg.verify.memory_mb)


def run_verify(cfg, out: _StageDir, pool=None, **_) -> dict:
    source = os.path.join(cfg.workdir, "filter", "problems.jsonl")
    if not cfg.verify.enabled:
        shutil.copyfile(source, out.file("problems.jsonl"))
        _write_jsonl(out.file("failed.jsonl"), [])
        return {"kept": sum(1 for _ in _read_jsonl(source)), "skipped": True}
    problems = list(_read_problems(source))
    own_pool = pool is None
    pool = _make_pool(cfg) if own_pool else pool
    cache = os.path.join(cfg.workdir, "verify_cache.jsonl") if cfg.verify.cache else None
    limits = (cfg.verify.timeout, cfg.verify.memory_mb)
    try:
        kept, counts, failures = verify.verify_problems(problems, cfg.verify, pool, cache_path=cache, limits=limits)
    finally:
        if own_pool:
            pool.close()
    _write_jsonl(out.file("problems.jsonl"), (p.to_json() for p in kept))
    _write_jsonl(out.file("failed.jsonl"), failures)
    return {"kept": len(kept), **counts}


def run_export(cfg, out: _StageDir, **_) -> dict:
    """Shuffled JSONL shards `{prefix}-0000i-of-0000N.jsonl` of Problem.to_json() rows + report."""
    rows = list(_read_jsonl(os.path.join(cfg.workdir, "verify", "problems.jsonl")))
    random.Random(cfg.export.seed).shuffle(rows)
    n = max(1, min(cfg.export.num_shards, len(rows))) if rows else 1
    shards = []
    for i in range(n):
        name = f"{cfg.export.prefix}-{i:05d}-of-{n:05d}.jsonl"
        _write_jsonl(out.file(name), rows[i::n])
        shards.append(name)
    problems = [Problem.from_json(r) for r in rows]
    summary = report.write_report(out.path, problems, {s: stage_done(cfg.workdir, s) for s in STAGES[:-1]})
    return {"problems": len(rows), "shards": shards, **summary}


_RUNNERS: dict[str, Callable] = {
    "collect": run_collect,
    "process": run_process,
    "filter": run_filter,
    "verify": run_verify,
    "export": run_export,
}


def _stage_config(cfg, stage: str) -> dict:
    if stage == "collect":
        return {"sources": cfg.sources.to_dict(), "files": _source_files(cfg)}
    if stage == "filter":  # the evaluation set and the pass-rate cache are inputs too
        paths = [p.strip() for p in cfg.filter.eval_problems.split(",")]
        return {"filter": cfg.filter.to_dict(), "files": _file_stats([*paths, cfg.filter.difficulty.pass_rate_cache])}
    block = {"process": cfg.process, "filter": cfg.filter, "verify": cfg.verify, "export": cfg.export}[stage]
    return block.to_dict()


def run_stage(cfg, stage: str, *, force: bool = False, **kw) -> dict:
    """Run one stage unless it is done with the same fingerprint (or `force`). Returns its record.
    The previous stage must be done. Keyword arguments go to the stage (`pass_rate_fn`, `pool`)."""
    index = STAGES.index(stage)
    upstream = stage_done(cfg.workdir, STAGES[index - 1]) if index else {"fingerprint": ""}
    if upstream is None:
        raise RuntimeError(f"stage {stage} needs stage {STAGES[index - 1]} first")
    fingerprint = _fingerprint(stage, _stage_config(cfg, stage), upstream["fingerprint"])
    done = stage_done(cfg.workdir, stage)
    if done and done.get("fingerprint") == fingerprint and not force:
        log.info("stage %s: done, skipped (use --force to rebuild)", stage)
        return done
    if done:
        log.info("stage %s: rebuilding (%s)", stage, "forced" if force else "config or input changed")
    os.makedirs(cfg.workdir, exist_ok=True)
    out = _StageDir(cfg.workdir, stage)
    start = time.time()
    try:
        counts = _RUNNERS[stage](cfg, out, **kw)
    except BaseException:
        out.abandon()
        raise
    record = {"stage": stage, "fingerprint": fingerprint, "seconds": round(time.time() - start, 3), **counts}
    out.commit(record)
    log.info("stage %s: done in %.1fs", stage, record["seconds"])  # its counts: the CLI's summary, report.md
    return record


def run_pipeline(cfg, stages=STAGES, *, force: bool = False, **kw) -> dict[str, dict]:
    """Run the given stages in order (the Python entry point; the CLI calls it). `force` rebuilds
    every stage listed. Keyword arguments reach the stages that take them."""
    return {stage: run_stage(cfg, stage, force=force, **kw) for stage in stages}


def shard_paths(cfg) -> list[str]:
    """The exported shard files (what the trainer reads with problems.load_problems)."""
    done = stage_done(cfg.workdir, "export")
    if done is None:
        raise RuntimeError(f"no finished export in {cfg.workdir}")
    return [os.path.join(cfg.workdir, "export", s) for s in done["shards"]]
