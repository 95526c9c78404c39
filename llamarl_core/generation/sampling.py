"""The sampling distribution as one pure function, and next-token sampling on device.

`sampling_logprobs(logits, temperature, top_k, top_p, min_p, repetition_penalty, seen, tokens= | u=)`
is the one definition of the distribution the engine draws from, in vLLM v1's order
(vllm/v1/sample/sampler.py: penalties on the raw logits, then temperature, then the min-p
processor, then top-k/top-p): the repetition penalty on the raw logits of the tokens already
seen (`penalize`), softmax(z / T), then min-p, top-k, then top-p (nucleus) truncation,
renormalised. min-p and top-k commute (both keep a best-first prefix); top-p's mass is that of
the tokens min-p and top-k kept (vLLM's; HF applies top-p before min-p, a different set).

The engine's behaviour log-prob μ of the token it draws (`sample_next`) and the trainer's π of
that token (`chunked_policy_logprobs`, chunk by chunk) are the same lines of that function on
the same logits, so on-policy π/μ = 1 up to float noise even when the options truncate or
penalise (ignoring truncation would make AIPO correct against a policy nobody
sampled from; issue #44's KL bug lived in a gap between two such formulas).

Greedy decoding (T = 0) has no sampling distribution: scoring at T = 0 is refused, RL refuses
`generation.temperature=0` (config), and greedy draws (eval) report log softmax(logits) at
T = 1 for information only.

Sampling is by inverse CDF, one uniform per row: over the unnormalised probabilities
w = exp(logits / T - max) (0 outside a top-k/top-p set), the token is the first whose
cumulative weight exceeds u * sum(w). It goes in two levels, so it is exact to fp32 rounding
of block sums and needs no [B, V] cumulative sum or noise: the vocabulary is cut into blocks
of 1024, a block is drawn by its summed weight, then a token inside it by its own cumulative
weight (float64, [B, 1024]). Nothing reads the device (no `multinomial`, which syncs on CUDA).
The engine keys each row's uniform by the sample, not by the batch row it sits in: row r's u
is `row_uniform(row_seed(seed, sample, step))` (a splitmix64 hash of the stream's seed, the
sample's index in the prompt list and the index of the token being drawn, as 53 bits). A
sample's tokens are then a function of its own logits and that key only: whichever rows share
its step, in whichever slot, whether its prompt was prefilled for it or once for its whole
group (scheduler.py), it draws the same token. Per step at 64 x 49k on one core this costs
one exp pass over the logits (4-5 ms), where the exponential race it replaced
(argmax(p / E), E = -log U from a [B, V] uniform drawn row by row) took ~50 ms (side by side).
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.utils.checkpoint

from .params import SamplingParams


def penalize(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019, arXiv 1909.05858, sec. 4.1) with the sign
    rule of HF's RepetitionPenaltyLogitsProcessor and vLLM: logits [..., V], seen bool [..., V]
    (the tokens of the prompt and of the completion so far) -> logits [..., V] where a seen
    token's logit is divided by `penalty` if positive and multiplied by it otherwise, so
    penalty > 1 always makes it less likely. Differentiable in the logits (the trainer's π)."""
    return torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)  # [..., V]


def first_positions(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """ids [B, L] -> [B, V] int64: the first position at which each token id occurs in its row
    (L if it never does). Position p's seen set is then `first <= p`: one [B, V] table instead of
    a [B, L, V] mask (the trainer builds each chunk's mask from it)."""
    B, L = ids.shape
    at = torch.arange(L, device=ids.device).expand(B, L)  # [B, L]
    return torch.full((B, vocab), L, dtype=torch.long, device=ids.device).scatter_reduce_(
        1, ids.long(), at, reduce="amin")  # [B, V]


def _cut(weights: torch.Tensor, top_k: int, top_p: float, min_p: float = 0.0) -> torch.Tensor:
    """weights [..., V] >= 0 (unnormalised probabilities) -> bool [..., V]: the tokens min-p
    (those below `min_p` x the best token's weight: Nguyen et al. 2024, arXiv 2407.01082), top-k
    (ties with the k-th are kept), then top-p (the smallest set, best first, whose mass before
    each kept token is at most `top_p` of the min-p/top-k set's) leave out."""
    cut = torch.zeros_like(weights, dtype=torch.bool)
    if min_p > 0:
        cut = weights < min_p * weights.amax(dim=-1, keepdim=True)  # [..., V]
    if 0 < top_k < weights.shape[-1]:
        cut = cut | (weights < weights.topk(top_k, dim=-1).values[..., -1:])
    if top_p < 1.0:
        ordered, order = weights.masked_fill(cut, 0.0).sort(dim=-1, descending=True)  # [..., V]
        before = ordered.cumsum(dim=-1) - ordered  # mass of strictly better tokens
        cut = cut | torch.zeros_like(cut).scatter(-1, order, before > top_p * ordered.sum(dim=-1, keepdim=True))
    return cut


def sampling_logprobs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
                      min_p: float = 0.0, repetition_penalty: float = 1.0, seen: Optional[torch.Tensor] = None,
                      *, tokens: Optional[torch.Tensor] = None, u: Optional[torch.Tensor] = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampling distribution, once: logits [..., V] -> (tokens [...], their log-probs [...]).

    With `tokens` it scores them (the trainer's π, differentiable); with uniforms `u` [B]
    (float64, `row_uniforms`) it first draws them by `inverse_cdf` from the kept tokens' weights
    exp(z / T - max) (the engine's μ). Temperature 0 without `tokens` is greedy: the argmax,
    reported at T = 1 without truncation (after the repetition penalty, which vLLM applies to
    greedy rows too). With `repetition_penalty` != 1, `seen` bool [..., V] is each position's
    prompt-and-completion-so-far set and z = `penalize(logits, seen, repetition_penalty)`, else
    z = logits. Both sides then run the same line:
      log p(t) = z_t / T - logsumexp(z / T over the kept tokens: min-p and top-k, then top-p).
    logsumexp is one fused pass forward and backward (the trainer's cost is log_softmax's, with
    no [..., V] log-prob tensor). A token outside the kept set (a stale sample whose token left
    the trainer's nucleus) scores log p_T(t) - log(kept mass): finite, with a finite gradient.
    The kept set is not differentiated."""
    if repetition_penalty != 1.0:
        if seen is None:
            raise ValueError(f"repetition_penalty={repetition_penalty} needs the seen-token mask `seen`")
        logits = penalize(logits.float(), seen, repetition_penalty)  # [..., V]
    if tokens is None and temperature == 0:
        tokens, temperature, top_k, top_p, min_p = logits.argmax(dim=-1), 1.0, 0, 1.0, 0.0
    if temperature <= 0:  # RL meets config/schema.py's check first; this guards direct callers
        raise ValueError(f"temperature must be > 0 for a sampling distribution, got {temperature} "
                         f"(greedy decoding has none)")
    z = logits.float() / temperature  # [..., V]
    truncated = bool(top_k) or top_p < 1.0 or min_p > 0
    if truncated or tokens is None:
        with torch.no_grad():
            weights = (z - z.amax(dim=-1, keepdim=True)).exp_()  # [..., V] unnormalised probabilities
            cut = _cut(weights, top_k, top_p, min_p) if truncated else None  # [..., V]
            if tokens is None:
                tokens = inverse_cdf(weights.masked_fill_(cut, 0.0) if truncated else weights, u)
    kept = z.masked_fill(cut, float("-inf")) if truncated else z  # [..., V]
    picked = z.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)  # [...]
    return tokens, picked - torch.logsumexp(kept, dim=-1)


_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def row_seed(seed: int, sample: int, step: int) -> int:
    """The noise seed of token `step` of sample `sample` in a stream seeded `seed` (63 bits)."""
    return _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ sample) ^ step) >> 1


def row_uniform(seed: int) -> float:
    """A `row_seed` as a uniform in [0, 1) (its top 53 bits)."""
    return (seed >> 10) * 2.0 ** -53


def row_uniforms(rows: int, noise: Union[torch.Generator, Sequence[Optional[int]], None],
                 device: torch.device) -> torch.Tensor:
    """u [rows] float64 in [0, 1): from one generator's stream, or row r from its own seed
    `noise[r]` (None: a row nobody reads, given 0.5)."""
    if not isinstance(noise, (list, tuple)):  # None or a generator (FakeCuda's is no torch.Generator instance)
        return torch.rand(rows, generator=noise, dtype=torch.float64, device=device)
    if len(noise) != rows:
        raise ValueError(f"{len(noise)} row seeds for {rows} rows")
    return torch.tensor([0.5 if seed is None else row_uniform(seed) for seed in noise], dtype=torch.float64,
                        device=device)


CDF_BLOCK = 1024  # tokens per block of the two-level inverse CDF


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """weights [B, V] >= 0, some > 0 in each row (unnormalised probabilities), u [B] float64 in
    [0, 1) -> tokens [B] int64: token i with probability weights[i] / sum(weights), as the first
    token whose cumulative weight exceeds u * sum. A token of weight 0 is never drawn."""
    B, V = weights.shape
    nb = -(-V // CDF_BLOCK)
    w = torch.nn.functional.pad(weights, (0, nb * CDF_BLOCK - V)) if V % CDF_BLOCK else weights
    blocks = w.reshape(B, nb, CDF_BLOCK)
    mass = blocks.sum(-1).double()  # [B, nb] fp32 sums (an fp64 sum of the whole would cast [B, V])
    cum = mass.cumsum(-1)  # [B, nb]
    target = (u * cum[:, -1]).unsqueeze(1)  # [B, 1]
    b = torch.searchsorted(cum, target, right=True)  # [B, 1] first block whose cumulative mass exceeds it
    b = torch.where(b < nb, b, cum.argmax(-1, keepdim=True))  # rounding at u -> 1: the last block with mass
    block_mass = mass.gather(1, b)  # [B, 1]
    frac = ((target - (cum.gather(1, b) - block_mass)) / block_mass).clamp_(0.0, 1.0)  # where in block b, as its share
    inner = blocks.gather(1, b[:, :, None].expand(B, 1, CDF_BLOCK)).squeeze(1).double().cumsum(-1)  # [B, BLOCK]
    i = torch.searchsorted(inner, frac * inner[:, -1:], right=True)  # [B, 1]
    i = torch.where(i < CDF_BLOCK, i, inner.argmax(-1, keepdim=True))  # frac = 1: the block's last token with weight
    return (b * CDF_BLOCK + i).squeeze(1)


LOGPROB_CHUNK_BYTES = 256 << 20  # fp32 logits of one chunk of positions (trainer log-probs)


def _chunk_logprobs(h: torch.Tensor, targets: torch.Tensor, head, temperature: float, top_k: int,
                    top_p: float, entropy: bool, untruncated: bool, min_p: float, penalty: float,
                    seen_from: Optional[torch.Tensor], first: int):
    # One [B·t, D] @ [D, V] GEMM: `h` is a slice of the hidden states, and a non-contiguous 3-D input
    # whose weight needs no gradient (a LoRA run's frozen head) goes to a broadcast bmm, 3x slower on CPU.
    logits = head(h.reshape(-1, h.shape[-1])).view(*h.shape[:-1], -1).float()  # [B, t, V]
    seen = None
    if seen_from is not None:  # position first + i has seen every token whose first position is <= it
        at = torch.arange(first, first + h.shape[1], device=h.device)  # [t]
        seen = seen_from[:, None, :] <= at[None, :, None]  # [B, t, V]
    _, logp = sampling_logprobs(logits, temperature, top_k, top_p, min_p, penalty, seen, tokens=targets)  # [B, t]
    full = torch.log_softmax(logits / temperature, dim=-1) if entropy else None  # [B, t, V]
    ent = -(full.exp() * full).sum(-1) if entropy else None  # [B, t]
    whole = sampling_logprobs(logits, temperature, tokens=targets)[1] if untruncated else None  # [B, t]
    return logp, ent, whole


def chunked_policy_logprobs(hidden: torch.Tensor, head, targets: torch.Tensor, temperature: float,
                            top_k: int = 0, top_p: float = 1.0, entropy: bool = False,
                            untruncated: bool = False, chunk_bytes: int | None = None, min_p: float = 0.0,
                            repetition_penalty: float = 1.0, seen_from: Optional[torch.Tensor] = None):
    """(log-probs [B, T] of `targets` under `sampling_logprobs(head(hidden), ...)`, with `entropy`
    that of softmax(logits / T) [B, T], with `untruncated` the targets' log-probs of plain
    softmax(logits / T), without min-p/top-k/top-p or repetition penalty [B, T]) without ever
    holding [B, T, V] logits. The untruncated ones come from the same chunk of logits (no second
    pass over the head): the distribution the KL to the reference is defined on, which a
    reference scored untruncated must share (a truncated π against an untruncated reference is
    not 0 at π = reference).

    With `repetition_penalty` != 1, `seen_from` [B, V] int64 is `first_positions` of the row's
    tokens counted from hidden position 0 (hidden position i has seen a token iff its entry is
    <= i): each chunk's [B, t, V] seen mask is one comparison against it, the engine's running
    per-row mask (scheduler.py) position by position.

    hidden [B, T, D] (normed), `head` the output projection. Positions go in chunks of about
    `chunk_bytes` of fp32 logits; with gradients each chunk is recomputed in backward
    (`torch.utils.checkpoint`), so forward and backward hold one chunk's logits and their
    gradient at a time, never the fp32 [B, T, V] logits and the buffers made from them (the
    penalty adds a bool mask and one penalised copy of the chunk's logits)."""
    B, T, _ = hidden.shape
    vocab = head.weight.shape[0]
    if repetition_penalty != 1.0 and seen_from is None:
        raise ValueError(f"repetition_penalty={repetition_penalty} needs `seen_from` (first_positions)")
    seen_from = seen_from if repetition_penalty != 1.0 else None
    per = max(1, (chunk_bytes or LOGPROB_CHUNK_BYTES) // max(1, B * vocab * 4))
    grad = torch.is_grad_enabled() and hidden.requires_grad
    parts: tuple[list, list, list] = ([], [], [])
    for s in range(0, T, per):
        args = (hidden[:, s:s + per], targets[:, s:s + per], head, temperature, top_k, top_p, entropy, untruncated,
                min_p, repetition_penalty, seen_from, s)
        out = (torch.utils.checkpoint.checkpoint(_chunk_logprobs, *args, use_reentrant=False) if grad
               else _chunk_logprobs(*args))
        for part, x in zip(parts, out):
            part.append(x)
    logp, ents, whole = parts
    return (torch.cat(logp, dim=1), torch.cat(ents, dim=1) if entropy else None,
            torch.cat(whole, dim=1) if untruncated else None)


def sample_next(logits: torch.Tensor, params: SamplingParams,
                noise: Union[torch.Generator, Sequence[Optional[int]], None],
                seen: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] -> (tokens [B] int64, their log-probs [B]: `sampling_logprobs`). `noise`:
    per-row seeds (`row_seed`, the engine) or one generator for all rows (`row_uniforms`).
    `seen` bool [B, V]: each row's prompt and completion so far (needed with a repetition penalty)."""
    u = row_uniforms(logits.shape[0], noise, logits.device) if params.temperature > 0 else None
    return sampling_logprobs(logits, params.temperature, params.top_k, params.top_p, params.min_p,
                             params.repetition_penalty, seen, u=u)
