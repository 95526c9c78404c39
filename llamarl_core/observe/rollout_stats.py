"""What the generators produced in one training batch, as metrics (`reward/std`,
`generator/completion_tokens_mean|max`, `generator/truncated_frac`).

A completion counts as cut at `max_new_tokens` by `algorithms.overlong.truncated_rows`, the rule
`algorithm.overlong` acts on. Values are logged as measured, never rounded.
"""
from __future__ import annotations

import torch

from llamarl_core.algorithms.metrics import as_float
from llamarl_core.algorithms.overlong import truncated_rows
from llamarl_core.wire.rollout import Rollout


@torch.no_grad()
def rollout_stats(batch: Rollout, max_new_tokens: int, eos_ids: tuple[int, ...]) -> dict[str, float]:
    if batch.num_rows == 0:  # dynamic sampling trained no group this step
        return {"reward/std": 0.0, "generator/completion_tokens_mean": 0.0,
                "generator/completion_tokens_max": 0, "generator/truncated_frac": 0.0}
    lens = batch.completion_lens                                           # [N]
    cut = truncated_rows(batch.tokens, batch.prompt_lens, lens, max_new_tokens, eos_ids)  # [N]
    return {"reward/std": as_float(batch.rewards.float().std(unbiased=False)),
            "generator/completion_tokens_mean": as_float(lens.float().mean()),
            "generator/completion_tokens_max": int(lens.max()),
            "generator/truncated_frac": as_float(cut.float().mean())}
