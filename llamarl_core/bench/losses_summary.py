"""What `llamarl bench losses` reads from a finished run directory, and the per-arm summary.

Pure functions of a run's files, so `--runs DIR` recomputes the JSON and tests feed hand-made
runs: `summary.json` (held-out accuracy before and after RL, steps, why it ended),
`metrics.jsonl` (one line per RL step: staleness, importance ratios, the MIS masked share) and
`timeline/` (when each eval ended, for the accuracy curve against RL wall time: run_stats).
Accuracies are fractions of the held-out set; gain = end - start, in the same unit.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from llamarl_core.bench.run_stats import accuracy_curve, read_jsonl, read_timeline, rl_window


def _mean(values: list) -> float | None:
    return statistics.mean(values) if values else None


def _metric(metrics: list[dict], key: str) -> list[float]:
    return [m[key] for m in metrics if m.get(key) is not None]


def run_record(run_dir: Path, arm: str, seed: int, overrides) -> dict:
    """One run: accuracy at the start of RL (after the shared warm start) and at its end, the
    curve, steps, realised staleness, importance-ratio stats and (MIS) the masked token share."""
    summary = json.loads((run_dir / "summary.json").read_text())
    config = run_dir / "config.yaml"  # the run's resolved config: its own time cap, whatever --seconds says now
    max_time_s = OmegaConf.load(config).run.max_time_s if config.is_file() else None
    metrics = read_jsonl(str(run_dir / "metrics.jsonl"))
    spans = read_timeline(str(run_dir))
    t0, _ = rl_window(spans)
    curve = [{"step": p["version"], "wall_s": round(p["wall_s"], 2), "accuracy": p["accuracy"]}
             for p in accuracy_curve(spans, summary, t0)]
    start, end = summary["accuracy_before"], summary["accuracy_after"]
    # one generator replica: a step's batch is one chunk, so its mean staleness is its staleness
    staleness = _metric(metrics, "trainer/staleness_mean")
    ratio_max = _metric(metrics, "trainer/is_ratio_max")
    return {"arm": arm, "seed": seed, "overrides": list(overrides), "run_dir": str(run_dir),
            "accuracy_start": start, "accuracy_end": end, "gain": round(end - start, 4),
            "curve": curve, "rl_steps": summary["steps"], "max_time_s": max_time_s,
            "rl_wall_s": summary.get("rl_wall_s"),
            "end_reason": summary.get("end_reason"),
            "staleness_mean": _mean(staleness), "staleness_max": max(_metric(metrics, "trainer/staleness_max"),
                                                                     default=None),
            "staleness_histogram": dict(sorted(Counter(str(round(s)) for s in staleness).items(),
                                               key=lambda kv: int(kv[0]))),
            "is_ratio_mean": _mean(_metric(metrics, "trainer/is_ratio_mean")),
            "is_ratio_max": max(ratio_max, default=None),
            "is_truncated_frac": _mean(_metric(metrics, "trainer/is_truncated_frac")),
            "mismatch_masked_frac": _mean(_metric(metrics, "trainer/mismatch_masked_frac"))}


def arm_summary(records: list[dict], overrides, why: str) -> dict:
    """An arm over its seeds: the mean gain and its spread (sample sd, min, max)."""
    gains = [r["gain"] for r in records]
    stale_means = [r["staleness_mean"] for r in records if r["staleness_mean"] is not None]
    stale_maxes = [r["staleness_max"] for r in records if r["staleness_max"] is not None]
    masked = [r["mismatch_masked_frac"] for r in records if r["mismatch_masked_frac"] is not None]
    return {"overrides": list(overrides), "why": why, "seeds": [r["seed"] for r in records],
            "accuracy_start": [r["accuracy_start"] for r in records],
            "accuracy_end": [r["accuracy_end"] for r in records], "gain": gains,
            "gain_mean": round(statistics.mean(gains), 4),
            "gain_sd": round(statistics.stdev(gains), 4) if len(gains) > 1 else 0.0,
            "gain_min": min(gains), "gain_max": max(gains),
            "rl_steps": [r["rl_steps"] for r in records],
            "staleness_mean": _mean(stale_means), "staleness_max": max(stale_maxes, default=None),
            "mismatch_masked_frac": _mean(masked)}


def assemble(records: list[dict], arm_table: dict, seconds: float) -> dict:
    """Every run's record and, per arm (in the order first run), its summary."""
    arms = list(dict.fromkeys(r["arm"] for r in records))
    return {"benchmark": "losses", "seconds_per_run": seconds,
            "arms": {a: arm_summary([r for r in records if r["arm"] == a], *arm_table[a]) for a in arms},
            "runs": records}


def print_table(result: dict) -> None:
    def fmt(x, spec=".2f"):
        return "-" if x is None else format(x, spec)
    print(f"{'arm':<13}{'seeds':>6}{'start':>7}{'end':>7}{'gain':>8}{'sd':>7}{'min..max':>14}"
          f"{'steps':>7}{'stale':>7}{'max':>5}{'masked':>8}")
    for name, a in result["arms"].items():
        spread = f"{a['gain_min']:+.2f}..{a['gain_max']:+.2f}"
        print(f"{name:<13}{len(a['seeds']):>6}{statistics.mean(a['accuracy_start']):>7.2f}"
              f"{statistics.mean(a['accuracy_end']):>7.2f}{a['gain_mean']:>+8.3f}{a['gain_sd']:>7.3f}{spread:>14}"
              f"{statistics.mean(a['rl_steps']):>7.0f}{fmt(a['staleness_mean']):>7}{fmt(a['staleness_max'], 'g'):>5}"
              f"{fmt(a['mismatch_masked_frac'], '.3f'):>8}")
