"""`llamarl bench losses`' figure (matplotlib, Agg): held-out greedy accuracy against wall
seconds since RL start, one colour per arm, one line per seed (solid, dashed, ... by seed
order). Curves over time rather than a bar of final gains: with equal wall time the x axis is
the budget itself, and a curve shows whether an arm's gain is still rising or noise at the end.
"""
from __future__ import annotations

from llamarl_core.bench.plots import _pyplot, save

COLORS = {"aipo": "tab:blue", "grpo": "tab:orange", "drgrpo": "tab:green", "gspo": "tab:red",
          "aipo_tis_k4": "tab:purple", "aipo_mis_k4": "tab:brown"}
STYLES = ("-", "--", ":", "-.")


def plot_losses(result: dict, out_png: str) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    seeds = sorted({r["seed"] for r in result["runs"]})
    for r in result["runs"]:
        a = result["arms"][r["arm"]]
        first = r["seed"] == a["seeds"][0]  # one legend entry per arm
        ax.plot([p["wall_s"] for p in r["curve"]], [p["accuracy"] for p in r["curve"]],
                color=COLORS.get(r["arm"]), linestyle=STYLES[seeds.index(r["seed"]) % len(STYLES)], marker=".",
                label=f"{r['arm']} (gain {a['gain_mean']:+.3f} ± {a['gain_sd']:.3f})" if first else None)
    ax.set_xlabel("wall seconds since RL start (evals included)")
    ax.set_ylabel("held-out greedy accuracy")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"{result.get('recipe', '')}: {result['seconds_per_run']:g} s of RL per run, seeds "
                 f"{', '.join(map(str, seeds))} ({'/'.join(STYLES[:len(seeds)])}), one shared warm start",
                 fontsize=9)
    fig.tight_layout()
    return save(plt, fig, out_png)
