"""Sizes of `scripts/gpu_check.py`'s sections per device (no torch here: the driver reads them
without paying for an import). `cuda` is what the check is for; `cpu` runs the same code at
sizes a 2-core machine does in seconds (the twin the test suite runs)."""

SIZES = {
    "cuda": dict(preset="tiny-100m", dtype="bfloat16", batch=64, prompt_tokens=32, new_tokens=128,
                 sync_mb=1024, sync_repeats=5, step_rows=32, step_seq=512, step_repeats=5,
                 warm_steps=100, mismatch_prompts=64,
                 train_recipe="gpu_1x", train_overrides=["run.max_steps=20", "run.eval_every_steps=20"]),
    "cpu": dict(preset=None, dtype="float32", batch=4, prompt_tokens=8, new_tokens=8,
                sync_mb=16, sync_repeats=3, step_rows=8, step_seq=48, step_repeats=2,
                warm_steps=3, mismatch_prompts=4,
                train_recipe="cpu_tiny",
                train_overrides=["run.max_steps=2", "warmstart.steps=2", "data.num_train_examples=64",
                                 "data.num_eval_examples=4", "run.eval_every_steps=0",
                                 "generation.max_new_tokens=8", "algorithm.prompts_per_step=4",
                                 "algorithm.group_size=2", "resources.generator.max_batch_size=8"]),
}
