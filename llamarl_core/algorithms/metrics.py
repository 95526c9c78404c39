"""Diagnostics of off-policy-ness for a training batch, all plain floats under no_grad.

- ``is_ratio_mean`` / ``is_ratio_max``: pi/mu over counted tokens; 1.0 when on-policy.
- ``is_truncated_frac``: share of tokens with pi/mu > rho (AIPO caps their weight).
- ``ppo_clip_frac``: share of tokens whose clipped ratio (pi/mu; pi/pi_old when a batch gets
  several updates) is outside [1 - eps_low, 1 + eps_high].
- ``ess``: normalised effective sample size of the truncated weights w = min(pi/mu, rho),
  (sum w)^2 / (n * sum w^2), in (0, 1]; 1.0 when all weights are equal.
- ``mismatch_kl``: E[log mu - log pi] over the sampled tokens, the train/generate mismatch
  (a k1 estimate of KL(mu || pi); 0 when the trainer reproduces the sampler exactly).
- ``staleness_mean`` / ``staleness_max``: policy versions between the generator's weights
  and the trainer's, per sequence (only when ``staleness`` is given).
"""
from __future__ import annotations

import math

import torch

# how a step's metrics fold over micro-batches and updates: maxima stay maxima, counts add up,
# the rest are weighted means
MAX_METRICS = ("is_ratio_max", "staleness_max")
SUM_METRICS = ("tokens",)  # counts: summed over micro-batches and updates (trainer/tokens_total)


def as_float(value: torch.Tensor) -> float:
    """A one-element tensor as the Python float that prints as its own dtype prints it: the
    shortest decimal that reads back as the same float32 (0.1, not 0.10000000149011612), so
    a log shows what was measured, no digit more and none less. float64 is returned as is."""
    x = float(value)
    if value.dtype == torch.float64 or not value.is_floating_point() or not math.isfinite(x):
        return x
    for digits in range(1, 18):
        shortest = float(f"{x:.{digits}g}")
        if torch.tensor(shortest, dtype=value.dtype).item() == x:
            return shortest
    return x


@torch.no_grad()
def importance_metrics(
    ratio: torch.Tensor,  # [B, T] pi/mu
    mask: torch.Tensor,  # [B, T] 0/1
    rho: float,
    clip_eps: float,
    staleness: torch.Tensor | None = None,  # [B]
    *,
    clip_eps_high: float | None = None,  # None: clip_eps on both sides
    clip_ratio: torch.Tensor | None = None,  # [B, T] the ratio PPO clips; None: `ratio`
) -> dict[str, float]:
    counted = mask > 0  # [B, T]
    r = ratio[counted].double()  # [n]
    c = r if clip_ratio is None else clip_ratio[counted].double()  # [n]
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    metrics: dict[str, float] = {"tokens": float(r.numel())}
    if r.numel() == 0:
        metrics.update(is_ratio_mean=1.0, is_ratio_max=1.0, is_truncated_frac=0.0,
                       ppo_clip_frac=0.0, ess=1.0, mismatch_kl=0.0)
    else:
        w = r.clamp(max=rho)  # [n]
        metrics.update(
            is_ratio_mean=float(r.mean()),
            is_ratio_max=float(r.max()),
            is_truncated_frac=float((r > rho).double().mean()),
            ppo_clip_frac=float(((c < 1 - clip_eps) | (c > 1 + hi)).double().mean()),
            ess=float(w.sum() ** 2 / (w.numel() * (w * w).sum()).clamp(min=1e-300)),
            mismatch_kl=float(-r.log().mean()),
        )
    if staleness is not None:
        s = staleness.detach().double().reshape(-1)  # [B]
        metrics["staleness_mean"] = float(s.mean()) if s.numel() else 0.0
        metrics["staleness_max"] = float(s.max()) if s.numel() else 0.0
    return metrics


def add_micro_metrics(sums: dict, metrics: dict, weight: float) -> None:
    """Fold one micro-batch's metrics into `sums`: maxima stay maxima, counts add up, the rest
    are summed with the micro-batch's loss weight (divided by the weights' sum at the end)."""
    for k, v in metrics.items():
        if k in MAX_METRICS:
            sums[k] = max(sums.get(k, -math.inf), v)
        elif k in SUM_METRICS:
            sums[k] = sums.get(k, 0.0) + v
        else:
            sums[k] = sums.get(k, 0.0) + v * weight


def combine_updates(updates: list[dict]) -> dict:
    """One step's metrics from its updates' (each update weighs the same; maxima stay maxima,
    counts add up)."""
    keys = dict.fromkeys(k for u in updates for k in u)
    return {k: max(u[k] for u in updates if k in u) if k in MAX_METRICS
            else sum(u[k] for u in updates if k in u) if k in SUM_METRICS
            else sum(u[k] for u in updates if k in u) / sum(1 for u in updates if k in u) for k in keys}
