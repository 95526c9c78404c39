"""What one finished run directory says about speed: pure functions of its files.

Everything comes from `timeline/<role>_<rank>.jsonl` (one span per line: role, rank, state,
t0, t1; state "wait" is idle) plus `metrics.jsonl` and `summary.json`, so the same numbers
can be recomputed from a committed run directory and tests can feed synthetic spans.

The RL window starts when the first RL rollout can begin: the end of the trainer's (or, in
sync mode, the colocated actor's) initial held-out eval, else the end of its warm start,
else its first span; it ends with the last `train` span. Warm start and the initial eval
are outside, so both modes are compared on RL alone.

Step times are measured on rank 0 of the training role between consecutive `train` ends,
minus any `eval`/`checkpoint` spans in between (periodic evals are not part of a step in
either mode).
"""
from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict

from llamarl_core.transport.idle import IDLE_STATES, both_idle_frac, both_idle_s, busy_intervals, union
from llamarl_core.transport.timeline_read import read_spans

PHASES = ("generate", "score", "train")
NOT_A_STEP = ("eval", "checkpoint")


def read_jsonl(path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{i}: not a JSON line ({e})") from None
    return rows


def read_timeline(run_dir: str) -> list[dict]:
    return read_spans(run_dir)


def training_role(spans: list[dict]) -> str:
    roles = {s["role"] for s in spans}
    return "actor" if "actor" in roles else "trainer"


def rl_window(spans: list[dict]) -> tuple[float, float]:
    """(t_start, t_end) unix seconds of the RL part of the run (see module docstring)."""
    role = training_role(spans)
    own = sorted((s for s in spans if s["role"] == role and s["rank"] == 0), key=lambda s: s["t0"])
    trains = [s for s in own if s["state"] == "train"]
    if not trains:
        raise ValueError(f"no 'train' span on {role} rank 0: the run did no RL step")
    first_train = trains[0]["t0"]
    before = [s for s in own if s["t1"] <= first_train]
    start = own[0]["t0"]
    for state in ("warmstart", "eval"):  # the initial eval follows the warm start
        ends = [s["t1"] for s in before if s["state"] == state]
        if ends:
            start = max(start, ends[0] if state == "eval" else ends[-1])
    return start, trains[-1]["t1"]


def _overlap(s: dict, t0: float, t1: float) -> float:
    return max(0.0, min(s["t1"], t1) - max(s["t0"], t0))


def overlap_s(spans: list[dict], state_a: str, state_b: str, t0: float, t1: float) -> float:
    """Seconds of [t0, t1] during which some rank is in `state_a` while some rank is in
    `state_b` (e.g. "generate" and "train": the overlap async RL exists for)."""
    def busy(state):
        return union([(max(s["t0"], t0), min(s["t1"], t1)) for s in spans
                       if s["state"] == state and s["t1"] > t0 and s["t0"] < t1])
    total, a, b = 0.0, busy(state_a), busy(state_b)
    for a0, a1 in a:
        for b0, b1 in b:
            total += max(0.0, min(a1, b1) - max(a0, b0))
    return total


def role_fractions(spans: list[dict], t0: float, t1: float) -> dict:
    """Per role: busy (non-wait) and idle ("wait") fractions of the window, mean over ranks,
    and seconds per state summed over ranks."""
    window = t1 - t0
    per_rank = defaultdict(lambda: defaultdict(float))
    for s in spans:
        per_rank[(s["role"], s["rank"])][s["state"]] += _overlap(s, t0, t1)
    out: dict = {}
    for role in sorted({r for r, _ in per_rank}):
        ranks = [states for (r, _), states in per_rank.items() if r == role]
        busy = [sum(v for k, v in st.items() if k != "wait") / window for st in ranks]
        idle = [st.get("wait", 0.0) / window for st in ranks]
        by_state: dict = defaultdict(float)
        for st in ranks:
            for k, v in st.items():
                by_state[k] += v
        out[role] = {"ranks": len(ranks), "busy_fraction": statistics.mean(busy),
                     "idle_fraction": statistics.mean(idle),
                     "seconds_by_state": {k: round(v, 4) for k, v in sorted(by_state.items())}}
    return out


def step_spans(own: list[dict]) -> list[dict]:
    """Each RL step's last "train" span on one rank, in time order (a trainer that starts
    micro-batches as groups arrive runs a step in several spans: resources.trainer.stream_groups)."""
    last: dict = {}
    for s in own:
        if s["state"] == "train":
            key = s.get("step", len(last))  # spans written before steps were recorded: one a step
            if key not in last or s["t1"] > last[key]["t1"]:
                last[key] = s
    return sorted(last.values(), key=lambda s: s["t1"])


def step_ends(own: list[dict]) -> list[float]:
    """Each RL step's end on one rank (`step_spans`)."""
    return [s["t1"] for s in step_spans(own)]


def step_busy_shares(spans: list[dict], roles: tuple[str, ...] = ("trainer", "generator")) -> list[dict]:
    """Per RL step after the first (between two of the trainer rank 0's step ends): {"step" (of
    its last train span), "t0", "t1", and each of `roles`' busy share of that window}."""
    ends = step_spans([s for s in spans if s["role"] == "trainer" and s["rank"] == 0])
    out = []
    for prev, s in zip(ends, ends[1:]):
        a, b = prev["t1"], s["t1"]
        out.append({"step": s.get("step"), "t0": a, "t1": b,
                    **{r: sum(y - x for x, y in busy_intervals(spans, {r}, a, b)) / (b - a) for r in roles}})
    return out


def idle_breakdown(spans: list[dict], t0: float, t1: float) -> dict:
    """Who idled while whom worked in [t0, t1] (an RL step's window, `step_busy_shares`), seconds:

        trainer_idle_while_generating_s   the trainer idle while the generator was busy: waiting
                                          for rows still being generated
        generator_idle_until_adoption_s   the generator idle until it took a new version (its next
                                          span is a `sync`): the staleness gate, which only the
                                          trainer's next version opens
        both_idle_s                       neither busy: a bubble no staleness bound explains

    A step whose busier role misses its share with `both_idle_s` near zero had no work left that
    either idle role was allowed to do: at k = 1 the trainer's wait is for its own step's groups
    and the generator's is for the version the trainer is still making."""
    both = both_idle_s(spans, ("trainer", "generator"), t0, t1)
    out = {"trainer_idle_while_generating_s": (t1 - t0) - both
           - sum(b - a for a, b in busy_intervals(spans, {"trainer"}, t0, t1)),
           "generator_idle_until_adoption_s": 0.0, "both_idle_s": both}
    # the generator's idle gaps from its first busy span on, each with the state that ended it
    gen = sorted((s for s in spans if s["role"] == "generator" and s["state"] not in IDLE_STATES),
                 key=lambda s: s["t0"])
    reach = gen[0]["t1"] if gen else t1
    for s in gen[1:]:
        if s["t0"] > reach and s["state"] == "sync":
            out["generator_idle_until_adoption_s"] += max(0.0, min(s["t0"], t1) - max(reach, t0))
        reach = max(reach, s["t1"])
    return out


def step_times(spans: list[dict], t_start: float) -> list[float]:
    """Seconds per RL step on the training role's rank 0, evals and checkpoints excluded."""
    role = training_role(spans)
    own = [s for s in spans if s["role"] == role and s["rank"] == 0]
    ends = step_ends(own)
    steps, prev = [], t_start
    for end in ends:
        pause = sum(_overlap(s, prev, end) for s in own if s["state"] in NOT_A_STEP)
        steps.append(end - prev - pause)
        prev = end
    return steps


def phase_seconds_per_step(spans: list[dict], t_start: float) -> dict:
    """Seconds each phase kept its role busy in an RL step (mean over that role's ranks), the
    median over steps: the statistic of the step time it is set beside (`step_times`), so a
    slow first step does not count in one and not the other. A step runs from the previous
    step's end (`t_start` for the first) to its own, on the training role's rank 0."""
    role = training_role(spans)
    ends = step_ends([s for s in spans if s["role"] == role and s["rank"] == 0])
    windows = list(zip([t_start, *ends[:-1]], ends))
    by_rank: dict = defaultdict(lambda: defaultdict(list))  # phase -> (role, rank) -> its spans
    for s in spans:
        if s["state"] in PHASES:
            by_rank[s["state"]][(s["role"], s["rank"])].append(s)
    per: dict = {}
    for phase in PHASES:
        ranks = by_rank[phase].values()
        per[phase] = statistics.median(
            statistics.mean(sum(_overlap(s, t0, t1) for s in own) for own in ranks)
            for t0, t1 in windows) if ranks and windows else 0.0
    return per


def accuracy_curve(spans: list[dict], summary: dict, t_start: float) -> list[dict]:
    """[(wall_s since RL start, policy_version, accuracy)] from the training role's evals."""
    by_version = {int(k): v for k, v in (summary.get("accuracy_by_version") or {}).items()}
    role = training_role(spans)
    evals = sorted((s for s in spans if s["role"] == role and s["rank"] == 0 and s["state"] == "eval"),
                   key=lambda s: s["t1"])
    curve = []
    for s in evals:
        v = s.get("version")
        if v in by_version:
            curve.append({"wall_s": max(0.0, s["t1"] - t_start) if v else 0.0, "version": v,
                          "accuracy": by_version[v]})
    return curve


def time_to_accuracy(curve: list[dict], target: float) -> float | None:
    for point in curve:
        if point["accuracy"] >= target:
            return point["wall_s"]
    return None


def run_stats(run_dir: str, target_accuracy: float) -> dict:
    """Every per-run number the sync-vs-async bench reports."""
    spans = read_timeline(run_dir)
    t0, t1 = rl_window(spans)
    steps = step_times(spans, t0)
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    curve = accuracy_curve(spans, summary, t0)
    tokens = max((m.get("generator/tokens", 0) for m in metrics), default=0)
    sync_s = [m["sync/seconds"] for m in metrics if "sync/seconds" in m]
    rewards = [{"wall_s": None, "step": m["step"], "reward_mean": m.get("reward/mean")} for m in metrics]
    ends = step_ends([s for s in spans if s["role"] == training_role(spans) and s["rank"] == 0])
    for r, end in zip(rewards, ends):
        r["wall_s"] = round(end - t0, 3)
    return {"run_dir": run_dir, "rl_wall_s": t1 - t0, "step_s": steps,
            "roles": role_fractions(spans, t0, t1),
            "both_idle_fraction": (both_idle_frac(spans, ("trainer", "generator"), t0, t1)
                                   if {"trainer", "generator"} <= {s["role"] for s in spans} else None),
            "phase_s_per_step": phase_seconds_per_step(spans, t0),
            "sync_s_per_step": statistics.median(sync_s) if sync_s else 0.0,
            "tokens_per_s": tokens / (t1 - t0) if t1 > t0 else 0.0,
            "accuracy_curve": curve, "reward_curve": rewards,
            "time_to_target_s": time_to_accuracy(curve, target_accuracy),
            "accuracy_before": summary.get("accuracy_before"),
            "accuracy_after": summary.get("accuracy_after"), "window": [t0, t1]}
