"""Resumable `step_<N>` checkpoints of the trainer (DCP over its group), read without a pickle."""
