"""Diagnostics of off-policy-ness for a training batch, all plain floats under no_grad.

- ``is_ratio_mean`` / ``is_ratio_max``: pi/mu over counted tokens; 1.0 when on-policy.
- ``is_truncated_frac``: share of tokens with pi/mu > rho (AIPO caps their weight).
- ``ppo_clip_frac``: share of tokens with pi/mu outside [1 - eps, 1 + eps].
- ``ess``: normalised effective sample size of the truncated weights w = min(pi/mu, rho),
  (sum w)^2 / (n * sum w^2), in (0, 1]; 1.0 when all weights are equal.
- ``mismatch_kl``: E[log mu - log pi] over the sampled tokens, the train/generate mismatch
  (a k1 estimate of KL(mu || pi); 0 when the trainer reproduces the sampler exactly).
- ``staleness_mean`` / ``staleness_max``: policy versions between the generator's weights
  and the trainer's, per sequence (only when ``staleness`` is given).
"""
from __future__ import annotations

import torch


@torch.no_grad()
def importance_metrics(
    ratio: torch.Tensor,  # [B, T] pi/mu
    mask: torch.Tensor,  # [B, T] 0/1
    rho: float,
    clip_eps: float,
    staleness: torch.Tensor | None = None,  # [B]
) -> dict[str, float]:
    counted = mask > 0  # [B, T]
    r = ratio[counted].double()  # [n]
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
            ppo_clip_frac=float(((r < 1 - clip_eps) | (r > 1 + clip_eps)).double().mean()),
            ess=float(w.sum() ** 2 / (w.numel() * (w * w).sum()).clamp(min=1e-300)),
            mismatch_kl=float(-r.log().mean()),
        )
    if staleness is not None:
        s = staleness.detach().double().reshape(-1)  # [B]
        metrics["staleness_mean"] = float(s.mean()) if s.numel() else 0.0
        metrics["staleness_max"] = float(s.max()) if s.numel() else 0.0
    return metrics
