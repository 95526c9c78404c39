"""The report's markdown: one row per run, the numbers a reader asks first, and the pictures."""
from __future__ import annotations

import os
import statistics

from llamarl_core.report.run_data import RunData


def _last(run: RunData, key: str):
    values = run.series(key)[1]
    return values[-1] if values else None


def _first(run: RunData, key: str):
    values = run.series(key)[1]
    return values[0] if values else None


def _fmt(value, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


def run_row(run: RunData) -> dict:
    steps = [m["step"] for m in run.metrics]
    step_s = run.series("trainer/step_s")[1]
    sync_s = run.series("sync/seconds")[1]
    acc = run.accuracy
    return {"run": run.label, "state": "finished" if run.finished else "running",
            "steps": f"{steps[-1] if steps else 0}/{run.max_steps}",
            "accuracy": f"{_fmt(acc[0][2] if acc else None)} → {_fmt(acc[-1][2] if acc else None)}",
            "reward (last)": _fmt(_last(run, "reward/mean")),
            "step s (median)": _fmt(statistics.median(step_s) if step_s else None, ".2f"),
            "sync ms (median)": _fmt(statistics.median(sync_s) * 1e3 if sync_s else None, ".1f"),
            "staleness (mean)": _fmt(statistics.mean(run.series("trainer/staleness_mean")[1])
                                     if run.series("trainer/staleness_mean")[1] else None, ".2f"),
            "wall s": _fmt(run.metrics[-1].get("wall_s") if run.metrics else None, ".0f"),
            **({"turns (last)": _fmt(_last(run, "env/turns_mean"), ".2f"),
                "tool calls (first → last)": f"{_fmt(_first(run, 'env/tool_calls_mean'), '.2f')} → "
                                             f"{_fmt(_last(run, 'env/tool_calls_mean'), '.2f')}"}
               if run.series("env/turns_mean")[1] else {})}


def markdown(runs: list[RunData], pngs: list[str], out_dir: str) -> str:
    rows = [run_row(r) for r in runs]
    cols = list(dict.fromkeys(c for r in rows for c in r))  # episode columns when any run has them
    lines = ["# llamarl report", "",
             "Accuracy is greedy held-out accuracy (first eval → last eval); wall seconds count from "
             "the trainer's start.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "–")) for c in cols) + " |" for r in rows]
    lines += ["", "Run directories:", ""] + [f"- `{r.label}`: {r.run_dir}" for r in runs] + [""]
    lines += [f"![{os.path.splitext(os.path.basename(p))[0]}]({os.path.relpath(p, out_dir)})" for p in pngs]
    return "\n".join(lines) + "\n"
