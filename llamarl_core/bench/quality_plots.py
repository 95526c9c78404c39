"""The quality bench's pictures (matplotlib, Agg).

- curves: held-out accuracy against RL samples (left) and wall seconds since RL start
  (right), the mean over seeds per configuration as a line, each seed faint.
- staleness: the realised staleness histogram per configuration (steps at each lag).
"""
from __future__ import annotations

import os
import statistics

from llamarl_core.bench.plots import _pyplot, save

COLORS = {"sync_k0": "black", "async_k1_aipo": "tab:blue", "async_k4_aipo": "tab:green",
          "async_k4_none": "tab:red", "async_k4_ppo_clip": "tab:orange", "streaming": "tab:purple"}


def plot_curves(result: dict, out_png: str) -> str:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for c in result["configs"]:
        color = COLORS.get(c["name"], None)
        curves = [r["curve"] for r in c["runs"]]
        for ax, key in zip(axes, ("samples", "wall_s")):
            for curve in curves:
                ax.plot([p[key] for p in curve], [p["accuracy"] for p in curve], color=color, alpha=0.25)
            n = min(len(cv) for cv in curves)
            xs = [statistics.mean(cv[i][key] for cv in curves) for i in range(n)]
            ys = [statistics.mean(cv[i]["accuracy"] for cv in curves) for i in range(n)]
            ax.plot(xs, ys, color=color, marker="o", linewidth=2,
                    label=f"{c['name']} ({c['final_accuracy_mean']:.3f} ± {c['final_accuracy_sd']:.3f})")
    axes[0].set_xlabel("RL samples (completions trained on)")
    axes[1].set_xlabel("wall seconds since RL start (evals included)")
    axes[0].set_ylabel("held-out greedy accuracy")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{result['recipe']}: {len(result['configs'][0]['seeds'])} seeds per configuration, "
                 f"one shared warm start ({result['warmstart_accuracy']:.3f}); mean line, seeds faint")
    fig.tight_layout()
    return save(plt, fig, out_png)


def plot_staleness(result: dict, out_png: str) -> str:
    plt = _pyplot()
    configs = result["configs"]
    fig, axes = plt.subplots(1, len(configs), figsize=(2.6 * len(configs) + 0.6, 3.0), sharey=True,
                             squeeze=False)
    axes = axes[0]
    for ax, c in zip(axes, configs):
        hist = {int(k): v for k, v in c["staleness_histogram"].items()}
        lags = list(range(0, max(max(hist), c["max_offpolicy_steps"]) + 1))
        ax.bar(lags, [hist.get(x, 0) for x in lags], color=COLORS.get(c["name"]))
        ax.set_xticks(lags)
        ax.set_title(f"{c['name']} (k={c['max_offpolicy_steps']})", fontsize=9)
        ax.set_xlabel("staleness (versions)")
    axes[0].set_ylabel("RL steps (all seeds)")
    fig.tight_layout()
    return save(plt, fig, out_png)


def quality_plot_paths(out_json: str) -> tuple[str, str]:
    stem = os.path.splitext(out_json)[0]
    return f"{stem}_curves.png", f"{stem}_staleness.png"
