"""The report's pictures (matplotlib, Agg), each overlaying every run given.

- accuracy_reward.png: held-out accuracy and reward mean against wall time and against RL
  samples trained (the sync-vs-async comparison a user makes by hand).
- gantt.png: per role rank, busy spans by state for a window of RL steps (blank = idle).
- offpolicy.png: staleness and importance ratio (mean and max) over steps.
- sync.png: weight-sync seconds per step.
"""
from __future__ import annotations

import os

from llamarl_core.bench.plots import _pyplot, draw_gantt, gantt_legend, save
from llamarl_core.bench.run_stats import step_spans
from llamarl_core.report.run_data import RunData


def _save(fig, plt, path: str, rect=(0, 0, 1, 1)) -> str:
    fig.tight_layout(rect=rect)
    return save(plt, fig, path, dpi=100)


def plot_accuracy_reward(runs: list[RunData], path: str) -> str:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for run in runs:
        steps = [s for s, _, _ in run.accuracy]
        axes[0, 0].plot([w for _, w, _ in run.accuracy], [a for _, _, a in run.accuracy], marker="o", label=run.label)
        axes[0, 1].plot([s * run.samples_per_step for s in steps], [a for _, _, a in run.accuracy], marker="o",
                        label=run.label)
        rs, rv = run.series("reward/mean")
        wall = {m["step"]: m.get("wall_s", 0.0) for m in run.metrics}
        axes[1, 0].plot([wall[s] for s in rs], rv, label=run.label)
        axes[1, 1].plot([s * run.samples_per_step for s in rs], rv, label=run.label)
    for ax, (y, x) in zip(axes.flat, [("held-out accuracy", "wall seconds since trainer start"),
                                      ("held-out accuracy", "RL samples trained"),
                                      ("reward mean", "wall seconds since trainer start"),
                                      ("reward mean", "RL samples trained")]):
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    return _save(fig, plt, path)


def step_window(spans: list[dict], num_steps: int) -> tuple[float, float, int, int] | None:
    """(t0, t1, first step, last step) of the last `num_steps` RL steps on the trainer's rank 0."""
    role = "actor" if any(s["role"] == "actor" for s in spans) else "trainer"
    trains = step_spans([s for s in spans if s["role"] == role and s["rank"] == 0])  # one per step
    if not trains:
        return None
    last = trains[-num_steps:]
    before = trains[-num_steps - 1]["t1"] if len(trains) > num_steps else last[0]["t0"]
    first_step = last[0].get("step", len(trains) - len(last)) + 1
    return before, last[-1]["t1"], first_step, first_step + len(last) - 1


def plot_gantt(runs: list[RunData], path: str, num_steps: int = 5) -> str:
    plt = _pyplot()
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 1.4 + 1.6 * len(runs)), squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        window = step_window(run.spans, num_steps)
        if window is None:
            ax.set_title(f"{run.label}: no RL step yet")
            continue
        t0, t1, a, b = window
        draw_gantt(ax, run.spans, t0, t1)
        ax.set_xlim(0, t1 - t0)
        ax.set_title(f"{run.label}: steps {a}–{b} (blank = idle)")
    axes[-1, 0].set_xlabel("seconds")
    gantt_legend(fig, plt)
    return _save(fig, plt, path, rect=(0, 0.07, 1, 1))  # room for the legend below


def plot_offpolicy(runs: list[RunData], path: str) -> str:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for run in runs:
        for ax, key in ((axes[0], "trainer/staleness"), (axes[1], "trainer/is_ratio")):
            line = None
            for stat, style in (("mean", "-"), ("max", ":")):
                s, v = run.series(f"{key}_{stat}")
                kw = {"color": line.get_color()} if line is not None else {}
                (line,) = ax.plot(s, v, style, label=f"{run.label} {stat}", **kw)
    axes[0].set_ylabel("staleness (policy versions)")
    axes[1].set_ylabel("importance ratio π/μ")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, plt, path)


def plot_sync(runs: list[RunData], path: str) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for run in runs:
        s, v = run.series("sync/seconds")
        ax.plot(s, [x * 1e3 for x in v], marker=".", label=run.label)
    ax.set_xlabel("step")
    ax.set_ylabel("weight sync, ms (trainer side)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def write_all(runs: list[RunData], out_dir: str, gantt_steps: int = 5) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    return [plot_accuracy_reward(runs, os.path.join(out_dir, "accuracy_reward.png")),
            plot_gantt(runs, os.path.join(out_dir, "gantt.png"), gantt_steps),
            plot_offpolicy(runs, os.path.join(out_dir, "offpolicy.png")),
            plot_sync(runs, os.path.join(out_dir, "sync.png"))]
