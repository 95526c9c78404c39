"""What the generators produced in one training batch, as metrics (`reward_std`,
`generator/completion_tokens_mean|max`, `generator/truncated_frac`).

A completion counts as cut at `max_new_tokens` when it has that many tokens and its last one
is not an end-of-sequence token (the engine keeps the EOS it stopped on in the completion).
"""
from __future__ import annotations

import torch

from llamarl_core.wire.rollout import Rollout


@torch.no_grad()
def rollout_stats(batch: Rollout, max_new_tokens: int, eos_ids: tuple[int, ...]) -> dict[str, float]:
    lens = batch.completion_lens                                           # [N]
    last = (batch.prompt_lens + lens - 1).clamp(min=0)                     # [N] index of the last token
    last_token = batch.tokens.gather(1, last[:, None])[:, 0]               # [N]
    ended = torch.isin(last_token, torch.tensor(eos_ids, dtype=last_token.dtype)) & (lens > 0)
    cut = (lens >= max_new_tokens) & ~ended                                # [N]
    return {"reward_std": round(float(batch.rewards.float().std(unbiased=False)), 4),
            "generator/completion_tokens_mean": round(float(lens.float().mean()), 2),
            "generator/completion_tokens_max": int(lens.max()),
            "generator/truncated_frac": round(float(cut.float().mean()), 4)}
