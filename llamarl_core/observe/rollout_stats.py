"""What the generators produced in one training batch, as metrics (`reward/std`,
`generator/completion_tokens_mean|max`, `generator/truncated_frac`; with an environment the
episodes' `env/turns_mean`, `env/tool_calls_mean`, `env/tool_errors` (a sum),
`env/truncated_frac` (cut by env.max_turns / max_episode_tokens / a turn's length),
`env/failed` (episodes whose environment raised, timed out or died: reward 0, not trained; a
sum) and `env/step_s` (the environment's seconds per turn: its reset and steps over the turns)).

A completion counts as cut at `max_new_tokens` by `algorithms.overlong.truncated_rows`, the rule
`algorithm.overlong` acts on. Values are logged as measured, never rounded.
"""
from __future__ import annotations

import torch

from llamarl_core.algorithms.metrics import as_float
from llamarl_core.algorithms.overlong import truncated_rows
from llamarl_core.wire.rollout import Rollout


@torch.no_grad()
def rollout_stats(batch: Rollout, max_new_tokens: int, eos_ids: tuple[int, ...],
                  episodes: bool = False) -> dict[str, float]:
    if batch.num_rows == 0:  # dynamic sampling trained no group this step
        return {"reward/std": 0.0, "generator/completion_tokens_mean": 0.0,
                "generator/completion_tokens_max": 0, "generator/truncated_frac": 0.0,
                **(dict.fromkeys(ENV_KEYS, 0.0) if episodes else {})}
    env = env_stats(batch) if episodes else {}
    lens = batch.completion_lens                                           # [N]
    cut = truncated_rows(batch.tokens, batch.prompt_lens, lens, max_new_tokens, eos_ids)  # [N]
    return {"reward/std": as_float(batch.rewards.float().std(unbiased=False)),
            "generator/completion_tokens_mean": as_float(lens.float().mean()),
            "generator/completion_tokens_max": int(lens.max()),
            "generator/truncated_frac": as_float(cut.float().mean()), **env}


ENV_KEYS = ("env/turns_mean", "env/tool_calls_mean", "env/tool_errors", "env/truncated_frac", "env/failed",
            "env/step_s")


def env_stats(batch: Rollout) -> dict[str, float]:
    """The episodes' metrics (ENV_KEYS) from their rows' counts (wire/rollout.py EPISODE_FIELDS)."""
    turns = batch.turns.float()                                            # [N]
    return {"env/turns_mean": as_float(turns.mean()),
            "env/tool_calls_mean": as_float(batch.tool_calls.float().mean()),
            "env/tool_errors": int(batch.tool_errors.sum()),
            "env/truncated_frac": as_float(batch.truncated.float().mean()),
            "env/failed": int(batch.failed.sum()),
            "env/step_s": as_float(batch.env_ms.float().sum() / 1000 / turns.sum().clamp(min=1))}
