"""Everything `llamarl report` reads from a run directory, tolerant of a run still going.

A run that is still writing may have a half-written last line in `metrics.jsonl` or a
timeline, and no `summary.json` yet: such a line is skipped, never an error. A line that is
broken in the middle of a file is corruption and is reported with file and line number.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field


def read_jsonl_tolerant(path: str) -> list[dict]:
    """JSON lines of `path`; a truncated *last* line (a writer mid-line) is dropped."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().split("\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines):  # no newline after it yet: still being written
                break
            raise ValueError(f"{path}:{i}: not a JSON line ({e})") from None
    return rows


@dataclass
class RunData:
    run_dir: str
    label: str
    metrics: list[dict]                       # metrics.jsonl, one dict per trainer step
    spans: list[dict]                         # every timeline span of every rank
    samples_per_step: int                     # RL samples (completions) trained per step
    max_steps: int
    summary: dict = field(default_factory=dict)
    accuracy: list[tuple[int, float, float]] = field(default_factory=list)  # (step, wall_s, acc)

    @property
    def finished(self) -> bool:
        return bool(self.summary)

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric over the steps that logged it."""
        pts = [(m["step"], float(m[key])) for m in self.metrics if isinstance(m.get(key), (int, float))]
        return [s for s, _ in pts], [v for _, v in pts]


def _config(run_dir: str) -> dict:
    path = os.path.join(run_dir, "plan.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f).get("config", {})


def _timeline(run_dir: str) -> list[dict]:
    folder = os.path.join(run_dir, "timeline")
    if not os.path.isdir(folder):
        return []
    return [s for name in sorted(os.listdir(folder)) if name.endswith(".jsonl")
            for s in read_jsonl_tolerant(os.path.join(folder, name))]


def _accuracy_points(metrics: list[dict], summary: dict, samples: list[dict]) -> list[tuple]:
    """(step, wall_s, accuracy): the initial eval (step 0) and every logged held-out eval."""
    points = [(m["step"], m.get("wall_s", 0.0), m["eval/accuracy"]) for m in metrics
              if "eval/accuracy" in m]
    first = next((s for s in samples if s.get("step") == 0 and "accuracy" in s), {})
    initial = (summary.get("accuracy_by_version") or {}).get("0", first.get("accuracy"))
    if initial is not None:  # the initial eval ran after the warm start: samples.jsonl has when
        points.insert(0, (0, float(first.get("wall_s", 0.0)), float(initial)))
    return points


def load_run(run_dir: str) -> RunData:
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"{run_dir}: not a run directory")
    metrics = read_jsonl_tolerant(os.path.join(run_dir, "metrics.jsonl"))
    if not metrics and not os.path.exists(os.path.join(run_dir, "plan.json")):
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl or plan.json (is it a llamarl run directory?)")
    summary_path = os.path.join(run_dir, "summary.json")
    summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {}
    cfg = _config(run_dir)
    algo = cfg.get("algorithm", {})
    samples = read_jsonl_tolerant(os.path.join(run_dir, "samples.jsonl"))
    return RunData(run_dir=run_dir, label=os.path.basename(os.path.normpath(run_dir)),
                   metrics=metrics, spans=_timeline(run_dir),
                   samples_per_step=int(algo.get("prompts_per_step", 1)) * int(algo.get("group_size", 1)),
                   max_steps=int(cfg.get("run", {}).get("max_steps", 0)), summary=summary,
                   accuracy=_accuracy_points(metrics, summary, samples))
