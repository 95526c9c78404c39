"""Completions that ran out of tokens: DAPO's overlong filtering and soft overlong punishment.

DAPO (Yu et al. 2025, arXiv 2503.14476, section 3.4): a completion cut at the generation
limit is scored as if its reasoning were wrong, which is noise, not signal.
- ``filter``: truncated completions are masked out of the loss (their group's advantages are
  computed as usual, so the other samples' advantages do not change).
- ``penalty``: a length-aware penalty is added to the reward. With L = max_new_tokens and a
  buffer of B tokens (DAPO's L_cache), a completion of n tokens gets

      0                      n <= L - B
      ((L - B) - n) / B      L - B < n <= L      (reaches -1 at n = L: every truncated one)

  DAPO's third case, n > L, cannot happen here: generation stops at L.
- ``keep``: nothing changes (the reward verifier alone decides).

A completion is truncated when it has L tokens and its last one is not an end-of-sequence
token (the engine keeps the EOS it stopped on in the completion).
"""
from __future__ import annotations

import torch


def truncated_rows(tokens: torch.Tensor, prompt_lens: torch.Tensor, completion_lens: torch.Tensor,
                   max_new_tokens: int, eos_ids: tuple[int, ...]) -> torch.Tensor:
    """[N] bool: the completion was cut at max_new_tokens (no EOS at its end)."""
    last = (prompt_lens + completion_lens - 1).clamp(min=0)                          # [N]
    last_token = tokens.gather(1, last[:, None])[:, 0]                               # [N]
    ended = torch.isin(last_token, torch.tensor(eos_ids, dtype=last_token.dtype)) & (completion_lens > 0)
    return (completion_lens >= max_new_tokens) & ~ended                              # [N]


def overlong_penalty(completion_lens: torch.Tensor, max_new_tokens: int, buffer_tokens: int) -> torch.Tensor:
    """[N] float32 DAPO soft overlong punishment, in [-1, 0]."""
    start = max_new_tokens - buffer_tokens                                           # L - B
    over = (completion_lens.float() - start).clamp(min=0.0)                          # [N]
    return -(over / buffer_tokens).clamp(max=1.0)                                    # [N]


def training_rewards(rewards: torch.Tensor, completion_lens: torch.Tensor, overlong: str,
                     max_new_tokens: int, buffer_tokens: int) -> torch.Tensor:
    """[N] the rewards advantages are computed from: the verifier's, plus the penalty if on."""
    if overlong != "penalty":
        return rewards
    return rewards + overlong_penalty(completion_lens, max_new_tokens, buffer_tokens).to(rewards.dtype)
