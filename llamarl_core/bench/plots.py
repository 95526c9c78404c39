"""The sync-vs-async bench's two pictures (matplotlib, Agg: no display needed).

- timeline: every role rank's activity over a window of the RL phase, one row per rank,
  one colour per state, sync on top and async below (a Gantt chart); idle is left blank, so
  the gaps are the point.
- accuracy: held-out accuracy against wall seconds since RL start, every run of both modes.
"""
from __future__ import annotations

import os

from llamarl_core.bench.run_stats import read_timeline, rl_window
from llamarl_core.transport.timeline import IDLE_STATES

COLORS = {"generate": "tab:blue", "score": "tab:orange", "train": "tab:green", "sync": "tab:red",
          "eval": "tab:purple", "checkpoint": "tab:gray", "warmstart": "tab:brown", "log": "tab:olive"}
MODE_COLORS = {"sync": "tab:red", "async": "tab:blue"}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw_gantt(ax, spans: list[dict], t0: float, t1: float) -> None:
    """The Gantt chart (bench timeline, report gantt.png): one row per role rank, one bar per
    busy span clipped to [t0, t1], x in seconds from t0; idle states are left blank."""
    rows = sorted({(s["role"], s["rank"]) for s in spans})
    for y, (role, rank) in enumerate(rows):
        for s in spans:
            if (s["role"], s["rank"]) != (role, rank) or s["state"] in IDLE_STATES:
                continue
            x0, x1 = max(s["t0"], t0) - t0, min(s["t1"], t1) - t0
            if x1 > x0:
                ax.barh(y, x1 - x0, left=x0, color=COLORS.get(s["state"], "black"), height=0.6)
    ax.set_yticks(range(len(rows)), [f"{r} {k}" for r, k in rows])


def save(plt, fig, out_png: str, dpi: int = 110) -> str:
    """Write `fig` to `out_png` (its folder made), close it, return the path."""
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    fig.savefig(out_png, dpi=dpi)
    plt.close(fig)
    return out_png


def gantt_legend(fig, plt) -> None:
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, list(COLORS), loc="lower center", ncol=len(COLORS), frameon=False)


def plot_timeline(run_dirs: dict, out_png: str, window_s: float | None = None) -> str:
    """run_dirs: {"sync": dir, "async": dir}; window_s: seconds from RL start (None = all)."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(run_dirs), 1, figsize=(11, 1.2 + 1.1 * 2 * len(run_dirs)),
                             squeeze=False)
    loaded = {mode: read_timeline(d) for mode, d in run_dirs.items()}
    windows = {mode: rl_window(spans) for mode, spans in loaded.items()}
    longest = max(t1 - t0 for t0, t1 in windows.values())
    xmax = longest if window_s is None else min(window_s, longest)  # same scale for both modes
    for ax, (mode, spans) in zip(axes[:, 0], loaded.items()):
        t0, t1 = windows[mode]
        end = min(xmax, t1 - t0)
        draw_gantt(ax, spans, t0, t0 + end)
        ax.set_xlim(0, xmax)
        ax.set_title(f"{mode}: role activity over the first {end:.0f} s of RL (blank = idle)")
    axes[-1, 0].set_xlabel("seconds since RL start")
    gantt_legend(fig, plt)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return save(plt, fig, out_png)


def plot_accuracy(result: dict, out_png: str) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for mode in ("sync", "async"):
        for i, run in enumerate(result[mode]["runs"]):
            curve = run["accuracy_curve"]
            if curve:
                ax.plot([p["wall_s"] for p in curve], [p["accuracy"] for p in curve], marker="o",
                        color=MODE_COLORS[mode], alpha=0.9 if i == 0 else 0.45,
                        label=mode if i == 0 else None)
    target = result.get("target_accuracy")
    if target is not None:
        ax.axhline(target, color="gray", linestyle=":", label=f"target {target:g}")
    ax.set_xlabel("wall seconds since RL start (evals included)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"{result['recipe']}: accuracy vs wall time, {result['steps']} steps x "
                 f"{result['repeats']} repeats")
    ax.legend()
    fig.tight_layout()
    return save(plt, fig, out_png)


def plot_paths(out_json: str) -> tuple[str, str]:
    stem = os.path.splitext(out_json)[0]
    return f"{stem}_timeline.png", f"{stem}_accuracy.png"
