"""The RL loop and everything only it uses: set-up, one step's rollout batch, evaluation, metrics,
checkpoint resume checks and preemption. `loop.train(config, workdir)` is the entry point."""
