"""The MicroCoder dataset pipeline: raw problem dumps -> filtered, verified training shards.

Stages (each in its own module): `collect` (readers: LiveCodeBench, APPS/TACO, CodeContests,
DeepCoder, problem folders; JSONL/JSON/Parquet/HF-cache Arrow), `process` (one schema:
`microcoder_jax.data.problems.Problem`), `filters` (+ `dedup`: MinHash/LSH, n-gram contamination),
`verify` (reference solutions under the judge), `report`; `stages` runs them resumably;
`config` holds every knob's default and meaning.

    from microcoder_jax.dataset import config, run_pipeline, shard_paths
    cfg = config.default_config()           # or get_config() of configs/data_pipeline.py
    run_pipeline(cfg, pass_rate_fn=my_fn)
"""

from microcoder_jax.dataset.stages import STAGES, run_pipeline, run_stage, shard_paths

__all__ = ["STAGES", "run_pipeline", "run_stage", "shard_paths"]
