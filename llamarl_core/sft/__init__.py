"""The supervised warm start: a stage of its own before RL (the trainer role runs it on its ranks)."""
