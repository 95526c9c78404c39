"""AIPO and its neighbours as one pure tensor loss: ``aipo_loss(...) -> (loss, metrics)``.

LlamaRL's AIPO (Asynchronous Importance-weighted Policy Optimization, arXiv 2505.24034)
corrects for generators that sample with slightly stale weights: each token's policy
gradient is weighted by the truncated importance ratio ``min(pi/mu, rho)``, where pi is
the trainer's probability of the sampled token, mu the generator's recorded probability
and rho the cap. The weight is a constant (stop-gradient), so per token

    loss_t = -stopgrad(min(pi/mu, rho)) * A_t * log pi_t
    grad_t = -min(pi/mu, rho) * A_t * grad log pi_t

and a token whose ratio exceeds rho still gets gradient ``rho * A * grad log pi``.

``kind`` selects the estimator behind the same interface:
- ``aipo``:  the truncated-IS estimator above.
- ``pg``:    plain on-policy policy gradient, ``-A * log pi`` (ignores mu).
- ``ppo``:   PPO/GRPO ratio clipping, ``-min(r*A, clip(r, 1-eps_low, 1+eps_high)*A)``,
             r = pi/mu (eps_high > eps_low is DAPO's clip-higher, arXiv 2503.14476 section 3.1).
- ``clamp``: ``-min(pi/mu, rho) * A`` with the ratio differentiated: gradient
             ``r*A*grad log pi`` below the cap and exactly 0 above it.
- ``gspo``:  ppo's clipped objective on GSPO's sequence ratio s_i = exp(mean_t log(pi/mu))
             (arXiv 2507.18071; algorithms/gspo.py).
``dual_clip_c`` (ppo, gspo) bounds the objective below by c*A where A < 0 (algorithms/dual_clip.py).

Several updates per batch (``old_logprobs`` = log pi_old, the trainer's policy before the
batch's first update): the ratio splits as pi/mu = (pi/pi_old) * (pi_old/mu), the decoupled
objective of Hilton et al. 2021 (arXiv 2110.00641) that AReaL uses for async RL. AIPO's
truncated weight ``w = stopgrad(min(pi_old/mu, rho))`` corrects the generator's lag and stays
fixed over the updates; the update ratio ``r = pi/pi_old`` (1 at the first update) is what
PPO clips:
- ``aipo``:  ``-w * r * A``            (gradient ``w * r * A * grad log pi``; = AIPO at r = 1)
- ``pg``:    ``-r * A``                (on-policy surrogate; = pg at r = 1)
- ``ppo``:   ``-w * min(r*A, clip(r, 1-eps_low, 1+eps_high)*A)``
- ``gspo``:  as ppo with r the sequence ratio exp(mean_t log(pi/pi_old)), w still per token
- ``clamp``: unchanged, ``-min(pi/mu, rho) * A`` (its cap is on the whole ratio)

Train-inference mismatch (``mismatch`` = tis | mis, algorithms/mismatch.py): the kind's loss
is taken on the update ratio r = pi/pi_old (pi_old = ``old_logprobs``, else the current log-probs
detached) and multiplied per token by the detached mismatch weight, which replaces AIPO's
min(pi_old/mu, rho). So ppo + tis at one update per batch has AIPO's gradient with rho = C.

Optional terms: ``kl_coef * k(pi || ref)`` with k the ``kl_estimator`` (algorithms/kl.py; k3 by
default), and ``-entropy_coef * entropy``. Both sides of the KL must be log-probs of one distribution:
``kl_logprobs`` (the policy's, untruncated, when the sampling truncates) replaces ``logprobs``
in it, so that pi = ref gives exactly 0. Metrics are plain floats computed under no_grad.

``length_norm_tokens`` (Dr.GRPO, Liu et al. 2025, arXiv 2503.20783 section 3.1): the loss is the
counted tokens' sum over (rows with tokens x this constant) instead of over the tokens counted,
so a sequence's weight no longer shrinks with its length (TRL ``loss_type="dr_grpo"``).
"""
from __future__ import annotations

import torch

from llamarl_core.algorithms.dual_clip import clipped_objective
from llamarl_core.algorithms.gspo import sequence_ratio
from llamarl_core.algorithms.kl import kl_estimate
from llamarl_core.algorithms.metrics import as_float, importance_metrics
from llamarl_core.algorithms.mismatch import mismatch_weight
from llamarl_core.config.choices import AGGREGATIONS, LOSS_KINDS
from llamarl_core.config.schema import AlgorithmConfig  # the keyword defaults: one source
MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: keeps r finite so r*A never becomes inf*0 = NaN


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, aggregation: str,
              length_norm_tokens: int | None = None) -> torch.Tensor:
    """Masked mean over all tokens, or over each sequence's tokens then over sequences; with
    `length_norm_tokens` (token_mean only) the token sum over rows-with-tokens x that constant."""
    if length_norm_tokens is not None and aggregation == "token_mean":
        rows = (mask.sum(dim=-1) > 0).to(per_token.dtype).sum()  # [] rows with any counted token
        return (per_token * mask).sum() / (rows * length_norm_tokens).clamp(min=1.0)  # []
    if length_norm_tokens is not None:
        raise ValueError(f"length_norm_tokens applies to aggregation='token_mean', got {aggregation!r}")
    if aggregation == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)  # []
    if aggregation == "sequence_mean":
        tokens_per_seq = mask.sum(dim=-1)  # [B]
        seq_loss = (per_token * mask).sum(dim=-1) / tokens_per_seq.clamp(min=1.0)  # [B]
        has_tokens = (tokens_per_seq > 0).to(per_token.dtype)  # [B]
        return (seq_loss * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)  # []
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


def aipo_loss(
    logprobs: torch.Tensor,  # [B, T] trainer log pi of the sampled tokens (requires grad)
    behavior_logprobs: torch.Tensor,  # [B, T] generator log mu recorded at sampling time
    advantages: torch.Tensor,  # [B, T] per-token advantages (already broadcast)
    mask: torch.Tensor,  # [B, T] 1 for completion tokens that count, 0 for padding/prompt
    rho: float,
    aggregation: str = AlgorithmConfig.aggregation,
    *,
    kind: str = AlgorithmConfig.name,
    clip_eps: float = AlgorithmConfig.clip_eps,  # PPO clip, lower side (and the upper one unless clip_eps_high is given)
    clip_eps_high: float | None = None,
    dual_clip_c: float | None = AlgorithmConfig.dual_clip_c,  # ppo/gspo: objective >= c*A where A < 0
    length_norm_tokens: int | None = None,  # Dr.GRPO's constant (generation.max_new_tokens); None: token counts
    old_logprobs: torch.Tensor | None = None,  # [B, T] log pi_old, when a batch gets several updates
    ref_logprobs: torch.Tensor | None = None,  # [B, T] reference-policy log-probs
    kl_logprobs: torch.Tensor | None = None,  # [B, T] the policy's log-probs on the reference's distribution
                                              # (untruncated, with grad); None: `logprobs`
    kl_coef: float = AlgorithmConfig.kl_coef,
    kl_estimator: str = AlgorithmConfig.kl_estimator,
    mismatch: str = AlgorithmConfig.mismatch,
    mismatch_cap: float = AlgorithmConfig.mismatch_cap,
    entropy: torch.Tensor | None = None,  # [B, T] per-token policy entropy
    entropy_coef: float = AlgorithmConfig.entropy_coef,
    staleness: torch.Tensor | None = None,  # [B] policy versions behind, per sequence
) -> tuple[torch.Tensor, dict[str, float]]:
    """The scalar loss to minimise and a dict of float metrics."""
    _check_inputs(logprobs, behavior_logprobs, advantages, mask, rho, kind)
    # bf16 log-probs would make exp(log pi - log mu) too coarse to see staleness: use >= fp32.
    logprobs = logprobs.to(torch.promote_types(logprobs.dtype, torch.float32))  # [B, T]
    mask = mask.to(logprobs.dtype)  # [B, T]
    behavior = behavior_logprobs.detach().to(logprobs.dtype)  # [B, T]
    advantages = advantages.detach().to(logprobs.dtype)  # [B, T]
    log_ratio = (logprobs - behavior).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T] pi/mu, differentiable
    lo, hi = 1.0 - clip_eps, 1.0 + (clip_eps if clip_eps_high is None else clip_eps_high)
    clip_ratio = ratio  # [B, T] the ratio PPO clips (and ppo_clip_frac counts)
    dual = None  # [B, T] where the dual-clip bound is active (ppo/gspo with dual_clip_c)
    metrics: dict[str, float] = {}
    if mismatch != "none":  # the behaviour correction is the mismatch weight, the ratio pi/pi_old
        if kind == "clamp":
            raise ValueError("mismatch corrections apply to aipo, pg, ppo and gspo, not clamp")
        old = (logprobs if old_logprobs is None else old_logprobs).detach().to(logprobs.dtype)  # [B, T]
        w, mm = mismatch_weight(old, behavior, mask, mismatch, mismatch_cap)  # [B, T]
        metrics.update(mm)
        clip_ratio = _update_ratio(kind, logprobs, old, mask)  # [B, T] pi/pi_old (gspo: the sequence's)
        per_token, dual = _decoupled(kind, clip_ratio, 1.0, advantages, lo, hi, dual_clip_c)  # [B, T]
        per_token = w.to(logprobs.dtype) * per_token  # [B, T]
    elif old_logprobs is not None and kind != "clamp":
        old = old_logprobs.detach().to(logprobs.dtype)  # [B, T]
        w = torch.exp((old - behavior).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)).clamp(max=rho)  # [B, T]
        clip_ratio = _update_ratio(kind, logprobs, old, mask)  # [B, T] pi/pi_old (gspo: the sequence's)
        per_token, dual = _decoupled(kind, clip_ratio, w, advantages, lo, hi, dual_clip_c)  # [B, T]
    elif kind == "aipo":
        weight = ratio.detach().clamp(max=rho)  # [B, T] stopgrad(min(r, rho))
        per_token = -weight * advantages * logprobs  # [B, T]
    elif kind == "pg":
        per_token = -advantages * logprobs  # [B, T]
    elif kind in ("ppo", "gspo"):
        if kind == "gspo":
            clip_ratio = sequence_ratio(log_ratio, mask)  # [B, T] s_i on each token of sequence i
        objective, dual = clipped_objective(clip_ratio, advantages, lo, hi, dual_clip_c)  # [B, T]
        per_token = -objective  # [B, T]
    else:  # clamp
        per_token = -ratio.clamp(max=rho) * advantages  # [B, T]
    if ref_logprobs is not None:
        policy = logprobs if kl_logprobs is None else kl_logprobs.to(logprobs.dtype)  # [B, T]
        kl = kl_estimate(policy, ref_logprobs, kl_estimator)  # [B, T]
        if kl_coef:
            per_token = per_token + kl_coef * kl  # [B, T]
        metrics["kl"] = _masked_mean(kl.detach(), mask)
    if entropy is not None:
        if entropy_coef:
            per_token = per_token - entropy_coef * entropy  # [B, T]
        metrics["entropy"] = _masked_mean(entropy.detach().to(logprobs.dtype), mask)
    else:  # E_{a~mu}[-log pi(a)]: the policy's entropy, estimated on the sampled tokens for free
        metrics["entropy"] = _masked_mean(-logprobs.detach(), mask)
    loss = aggregate(per_token, mask, aggregation, length_norm_tokens)  # []
    if dual is not None:
        metrics["dual_clip_frac"] = _masked_mean(dual.to(mask.dtype), mask)
    metrics.update(importance_metrics(ratio.detach(), mask, rho, clip_eps, staleness, clip_eps_high=clip_eps_high,
                                      clip_ratio=clip_ratio.detach()))
    metrics["loss"] = as_float(loss.detach())
    return loss, metrics


def _update_ratio(kind: str, logprobs: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The update ratio pi/pi_old [B, T] the decoupled losses clip: per token, or gspo's sequence
    ratio on each token of its sequence."""
    update_log = (logprobs - old).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [B, T] log pi/pi_old
    return sequence_ratio(update_log, mask) if kind == "gspo" else torch.exp(update_log)  # [B, T]


def _decoupled(kind: str, r: torch.Tensor, w: torch.Tensor | float, advantages: torch.Tensor,
               lo: float, hi: float, dual_clip_c: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token loss of several updates per batch: update ratio r = pi/pi_old (differentiable;
    gspo: the sequence's), fixed behaviour weight w = min(pi_old/mu, rho) (detached); and where
    the dual clip is active."""
    if kind == "aipo":
        return -w * r * advantages, None  # [B, T]
    if kind == "pg":
        return -r * advantages, None  # [B, T]
    objective, dual = clipped_objective(r, advantages, lo, hi, dual_clip_c)  # [B, T] ppo, gspo
    return -w * objective, dual  # [B, T]


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return as_float((values * mask).sum() / mask.sum().clamp(min=1.0))


def _check_inputs(logprobs, behavior_logprobs, advantages, mask, rho, kind) -> None:
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss kind must be one of {LOSS_KINDS}, got {kind!r}")
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    for name, tensor in (("behavior_logprobs", behavior_logprobs),
                         ("advantages", advantages), ("mask", mask)):
        if tensor.shape != logprobs.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)}, expected {tuple(logprobs.shape)} "
                "like logprobs (advantages must be broadcast per token)"
            )
    if kind in ("aipo", "clamp") and not rho > 0:
        raise ValueError(f"rho (the importance-ratio cap) must be > 0, got {rho}")
