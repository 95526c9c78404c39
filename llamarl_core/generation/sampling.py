"""Next-token sampling on device, without host synchronisation.

Sampling uses the exponential-race form of the Gumbel-max trick: argmax(p / E) with
E ~ Exp(1) draws exactly from p, needs no `multinomial` (which syncs on CUDA) and is
deterministic for a seeded `torch.Generator`. The reported log-prob is computed with the
same expression as `token_logprobs` (`log_softmax(logits.float() / T)`), so the engine's μ and
the trainer's π agree to float noise.
"""
from __future__ import annotations

from typing import Optional

import torch

from .params import SamplingParams


def _truncate(logp: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set log-probs outside the top-k / top-p nucleus to -inf. logp [B, V]."""
    if top_k and top_k < logp.shape[-1]:
        kth = logp.topk(top_k, dim=-1).values[:, -1:]  # [B, 1]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logp, order = logp.sort(dim=-1, descending=True)  # [B, V]
        sorted_p = sorted_logp.exp()
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p  # probability of strictly better tokens
        sorted_logp = sorted_logp.masked_fill(mass_before > top_p, float("-inf"))
        logp = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_logp)
    return logp


def sample_next(logits: torch.Tensor, params: SamplingParams,
                generator: Optional[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] -> (tokens [B] int64, log-probs [B] under softmax(logits / T))."""
    logp = torch.log_softmax(logits.float() / params.logprob_temperature, dim=-1)  # [B, V]
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
    else:
        probs = _truncate(logp, params.top_k, params.top_p).exp()  # [B, V], zeros outside
        race = torch.empty_like(probs).exponential_(1.0, generator=generator)
        tokens = (probs / race).argmax(dim=-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
