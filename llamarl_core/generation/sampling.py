"""The sampling distribution as one pure function, and next-token sampling on device.

`sampling_logprobs(logits, temperature, top_k, top_p)` is the distribution the engine draws
from: softmax(logits / T), then top-k, then top-p (nucleus) truncation, each renormalised,
as log-probs with -inf outside the kept set. The engine's behaviour log-prob μ of a sampled
token and the trainer's π of that token are both read off this function (the trainer through
`sampled_token_logprobs`), so on-policy π/μ = 1 up to float noise even when `top_k`/`top_p`
truncate; ignoring truncation would make AIPO correct against a policy nobody sampled from.

Greedy decoding (T = 0) has no sampling distribution: `sampling_logprobs` refuses it, RL
refuses `generation.temperature=0` (config), and greedy completions (eval) report
log softmax(logits) at T = 1 for information only.

Sampling uses the exponential-race form of the Gumbel-max trick: argmax(p / E) with
E ~ Exp(1) draws exactly from p and needs no `multinomial` (which syncs on CUDA). The engine
keys each row's noise by the sample, not by the batch row it sits in: row r's E comes from
its own seed, `row_seed(seed, sample, step)` (a splitmix64 hash of the stream's seed, the
sample's index in the prompt list and the index of the token being drawn). A sample's tokens
are then a function of its own logits and that key only: whichever rows share its step, in
whichever slot, whether its prompt was prefilled for it or once for its whole group
(scheduler.py), it draws the same noise. E = -log(U) with U uniform: on CPU `uniform_` is
~4x cheaper than `exponential_` at 64 x 49k (measured: 51 ms vs 221 ms on 1 loaded core).
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.utils.checkpoint

from .params import SamplingParams


def _kept(logp: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Boolean mask [..., V] of the tokens top-k then top-p keep from log-probs `logp`."""
    keep = torch.ones_like(logp, dtype=torch.bool)
    if top_k and top_k < logp.shape[-1]:
        kth = logp.topk(top_k, dim=-1).values[..., -1:]  # [..., 1]
        keep = logp >= kth  # ties with the k-th token are kept
        logp = torch.log_softmax(logp.masked_fill(~keep, float("-inf")), dim=-1)  # renormalised
    if top_p < 1.0:
        sorted_logp, order = logp.sort(dim=-1, descending=True)  # [..., V]
        sorted_p = sorted_logp.exp()
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p  # probability of strictly better tokens
        keep = keep & torch.zeros_like(keep).scatter(-1, order, mass_before <= top_p)
    return keep


def sampling_logprobs(logits: torch.Tensor, temperature: float, top_k: int = 0,
                      top_p: float = 1.0) -> torch.Tensor:
    """logits [..., V] -> log-probs [..., V] of the truncated, renormalised sampling
    distribution (temperature, then top-k, then top-p); -inf outside the kept tokens."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for a sampling distribution, got {temperature} "
                         f"(greedy decoding has none)")
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [..., V]
    if not top_k and top_p >= 1.0:
        return logp
    return torch.log_softmax(logp.masked_fill(~_kept(logp, top_k, top_p), float("-inf")), dim=-1)


def sampled_token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                           top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """logits [B, T, V], targets [B, T] -> log-probs [B, T] of `targets` under
    `sampling_logprobs`, finite everywhere.

    A target outside this model's kept set (a stale sample whose token fell out of the
    current nucleus, or a tie flipped by float noise) truly has probability 0; it is scored
    log p_T(token) - log(kept mass) instead, the same formula as inside the set, so the loss
    and its gradient stay finite and the importance ratio is small rather than 0.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for a sampling distribution, got {temperature}")
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, T, V]
    target_logp = logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)  # [B, T]
    if not top_k and top_p >= 1.0:
        return target_logp
    with torch.no_grad():
        keep = _kept(logp.detach(), top_k, top_p)  # [B, T, V] the set is not differentiated
    kept_mass = torch.logsumexp(logp.masked_fill(~keep, float("-inf")), dim=-1)  # [B, T]
    return target_logp - kept_mass


_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def row_seed(seed: int, sample: int, step: int) -> int:
    """The noise seed of token `step` of sample `sample` in a stream seeded `seed` (63 bits)."""
    return _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ sample) ^ step) >> 1


def race_noise(logp: torch.Tensor, noise: Union[torch.Generator, Sequence[Optional[int]], None]
               ) -> torch.Tensor:
    """E ~ Exp(1) shaped like logp [B, V]: from one generator's stream, or row r from its own
    seed `noise[r]` (None: a row nobody reads, left at E = 1 without drawing)."""
    if not isinstance(noise, (list, tuple)):  # None or a generator (FakeCuda's is no torch.Generator instance)
        return torch.empty_like(logp).exponential_(1.0, generator=noise)
    if len(noise) != logp.shape[0]:
        raise ValueError(f"{len(noise)} row seeds for {logp.shape[0]} rows")
    uniform = torch.empty_like(logp)
    generator = torch.Generator(device=logp.device)
    for r, seed in enumerate(noise):
        if seed is None:
            uniform[r].fill_(1 / torch.e)
        else:
            uniform[r].uniform_(generator=generator.manual_seed(seed))
    return uniform.log_().neg_()  # U = 0 gives E = inf: that token cannot win


LOGPROB_CHUNK_BYTES = 256 << 20  # fp32 logits of one chunk of positions (trainer log-probs)


def _chunk_logprobs(h: torch.Tensor, targets: torch.Tensor, head, temperature: float, top_k: int,
                    top_p: float, entropy: bool):
    logits = head(h).float()  # [B, t, V]
    logp = sampled_token_logprobs(logits, targets, temperature, top_k, top_p)  # [B, t]
    if not entropy:
        return logp, None
    full = torch.log_softmax(logits / temperature, dim=-1)  # [B, t, V]
    return logp, -(full.exp() * full).sum(-1)  # [B, t]


def chunked_sampled_logprobs(hidden: torch.Tensor, head, targets: torch.Tensor, temperature: float,
                             top_k: int = 0, top_p: float = 1.0, entropy: bool = False,
                             chunk_bytes: int | None = None):
    """`sampled_token_logprobs(head(hidden), targets, ...)` [B, T] (and the entropy of
    softmax(logits / T) [B, T] with `entropy`) without ever holding [B, T, V] logits.

    hidden [B, T, D] (normed), `head` the output projection. Positions go in chunks of about
    `chunk_bytes` of fp32 logits; with gradients each chunk is recomputed in backward
    (`torch.utils.checkpoint`), so forward and backward hold one chunk's logits and their
    gradient at a time: the fp32 [B, T, V] logits, their temperature-scaled copy, the log
    softmax and its gradient (four full-size tensors, more with top-k/top-p) are never made."""
    B, T, _ = hidden.shape
    vocab = head.weight.shape[0]
    per = max(1, (chunk_bytes or LOGPROB_CHUNK_BYTES) // max(1, B * vocab * 4))
    grad = torch.is_grad_enabled() and hidden.requires_grad
    logps, ents = [], []
    for s in range(0, T, per):
        args = (hidden[:, s:s + per], targets[:, s:s + per], head, temperature, top_k, top_p, entropy)
        lp, ent = (torch.utils.checkpoint.checkpoint(_chunk_logprobs, *args, use_reentrant=False) if grad
                   else _chunk_logprobs(*args))
        logps.append(lp)
        ents.append(ent)
    return torch.cat(logps, dim=1), (torch.cat(ents, dim=1) if entropy else None)


def sample_next(logits: torch.Tensor, params: SamplingParams,
                noise: Union[torch.Generator, Sequence[Optional[int]], None]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] -> (tokens [B] int64, log-probs [B] under the sampling distribution;
    greedy: log softmax(logits) at T = 1). `noise`: per-row seeds (`row_seed`, the engine)
    or one generator for all rows (`race_noise`)."""
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits.float(), dim=-1)  # [B, V]
    else:
        logp = sampling_logprobs(logits, params.temperature, params.top_k, params.top_p)  # [B, V]
        race = race_noise(logp, noise)  # [B, V]
        tokens = (logp.exp() / race).argmax(dim=-1)  # zeros outside the kept set never win
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
