"""Everything `llamarl report` reads from a run directory, tolerant of a run still going.

A run that is still writing may have a half-written last line in `metrics.jsonl` or a
timeline, and no `summary.json` yet: such a line is skipped, never an error. A line that is
broken in the middle of a file is corruption and is reported with file and line number.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from llamarl_core.transport.timeline_read import is_number as _number, read_jsonl_tolerant, read_spans


def _metrics(path: str) -> list[dict]:
    """metrics.jsonl rows, each with an integer step and numeric timings (what the plots use)."""
    rows = read_jsonl_tolerant(path)
    for i, row in enumerate(rows, 1):
        bad = next((k for k in ("step", "wall_s", "eval/accuracy") if k in row and
                    not _number(row[k], whole=k == "step")), None)
        if bad or "step" not in row:
            raise ValueError(f"{path}: row {i} has {'no step' if not bad else f'{bad}={row[bad]!r}'}"
                             " (not a metrics line llamarl writes)")
    return rows


def _whole(section: dict, key: str, default: int, run_dir: str) -> int:
    value = section.get(key, default)
    if not _number(value, whole=True):
        raise ValueError(f"{os.path.join(run_dir, 'plan.json')}: config {key}={value!r} is not a whole number")
    return value


def _json_object(path: str) -> dict:
    """summary.json / plan.json: {} when absent, a JSON object or a one-line ValueError."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        try:
            data = json.load(f)
        except ValueError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a JSON {type(data).__name__}, not an object")
    return data


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
    cfg = _json_object(path).get("config", {})
    if not isinstance(cfg, dict) or not all(isinstance(cfg.get(k, {}), dict) for k in ("algorithm", "run")):
        raise ValueError(f"{path}: 'config' is not the config llamarl writes")
    return cfg


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
    metrics = _metrics(os.path.join(run_dir, "metrics.jsonl"))
    if not metrics and not os.path.exists(os.path.join(run_dir, "plan.json")):
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl or plan.json (is it a llamarl run directory?)")
    summary = _json_object(os.path.join(run_dir, "summary.json"))
    cfg = _config(run_dir)
    algo = cfg.get("algorithm", {})
    samples = read_jsonl_tolerant(os.path.join(run_dir, "samples.jsonl"))
    return RunData(run_dir=run_dir, label=os.path.basename(os.path.normpath(run_dir)),
                   metrics=metrics, spans=read_spans(run_dir, missing_ok=True),
                   samples_per_step=_whole(algo, "prompts_per_step", 1, run_dir) * _whole(algo, "group_size", 1, run_dir),
                   max_steps=_whole(cfg.get("run", {}), "max_steps", 0, run_dir), summary=summary,
                   accuracy=_accuracy_points(metrics, summary, samples))
