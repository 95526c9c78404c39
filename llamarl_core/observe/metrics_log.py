"""metrics.jsonl (one line per trainer step) and the live-view copy in the store.

Keys are `role/quantity` with units in the name; values are written as measured (Python's
shortest repr of each float), never rounded. The trainer's rank 0 writes; it reads the
other roles' counters (busy/idle seconds, tokens, syncs) from the store's stats keys. Each line
also goes to TensorBoard (`tensorboard_log.py`) unless `logging.tensorboard=false`, and to
Weights & Biases (`wandb_log.py`) with `logging.wandb=true`. While the run cannot learn
(every reward errored, or one reward value for every sample: learning_signal.py) a line
also holds `warnings`, a list of sentences (text: the scalar sinks skip it).
"""
from __future__ import annotations

import json
import os
import time

import torch

from llamarl_core.config.schema import LoggingConfig
from llamarl_core.eval.episodes import episode_from
from llamarl_core.observe.learning_signal import LearningSignal
from llamarl_core.observe.tensorboard_log import TensorBoardLog
from llamarl_core.observe.wandb_log import WandbLog
from llamarl_core.transport.control import ControlPlane
from llamarl_core.transport.idle import TimelineTail, both_idle_frac


class MetricsLog:
    def __init__(self, run_dir: str, control: ControlPlane, role_sizes: dict[str, int],
                 logging: LoggingConfig | None = None, first_step: int = 1):
        logging = logging or LoggingConfig()
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self._file = open(self.path, "a", buffering=1)
        self.control, self.role_sizes = control, role_sizes
        self.t_start = time.time()
        self.tb = TensorBoardLog.open(run_dir, logging.tensorboard,
                                      purge_step=first_step if first_step > 1 else None)
        self.wandb = WandbLog.open(run_dir, logging, first_step)
        # pipeline/both_idle_frac: from the timelines of this run directory (the generators'
        # are there when they share its file system; the key is left out otherwise)
        self.timelines = TimelineTail(run_dir, ("trainer", "generator"))
        self.rl_start: float | None = None  # set by the trainer when its RL loop begins
        self.signal = LearningSignal()  # whether the run can learn: summary.json's warnings
        self._terms_seen: dict[str, tuple[float, int]] = {}  # data.rewards' term sums at the last line

    def role_stats(self) -> dict:
        out: dict = {}
        for role in ("generator", "reward"):
            stats = [self.control.stats(role, r) for r in range(self.role_sizes.get(role, 0))]
            stats = [s for s in stats if s]
            if not stats:
                continue
            busy = sum(s["busy_s"] for s in stats) / len(stats)
            idle = sum(s["idle_s"] for s in stats) / len(stats)
            out[f"{role}/busy_s"], out[f"{role}/idle_s"] = busy, idle
            out[f"{role}/busy_frac"] = busy / (busy + idle) if busy + idle > 0 else 0.0
            if role == "reward":  # samples scored 0 because the verifier raised / ran out of time
                pools = [s.get("pool", {}) for s in stats]
                out["reward/errors"] = sum(p.get("errors", 0) for p in pools)
                out["reward/timeouts"] = sum(p.get("timeouts", 0) for p in pools)
                out["reward/scored"] = sum(p.get("items", 0) for p in pools)
                errors = [s["first_error"] for s in stats if s.get("first_error")]
                if errors:  # text, for LearningSignal's words; not a metric
                    out["reward/first_error"] = errors[0]
                out.update(self.term_means([s["terms"] for s in stats if s.get("terms")]))
            if role == "generator":
                out["generator/tokens_per_s"] = sum(s["tokens_per_s"] for s in stats)
                out["generator/tokens"] = sum(s["tokens"] for s in stats)
                kls = [s["quant_kl"] for s in stats if "quant_kl" in s]
                if kls:  # quantized generator: token-level KL(full || quantized), mean of replicas
                    out["generator/quant_kl"] = sum(kls) / len(kls)
                syncs = [s["sync"] for s in stats if s.get("sync")]
                if syncs:
                    out["sync/receive_seconds"] = max(x["seconds"] for x in syncs)
        return out

    def term_means(self, per_rank: list[dict]) -> dict:
        """`reward/<name>_mean` per term of data.rewards: its unweighted mean over the samples the
        reward ranks scored since the previous line (per rank: {name: [sum, count]} so far). In a
        synchronous run (k = 0) with one trainer rank those are this step's batch, so
        `reward/mean` = sum_i weight_i * reward/<name_i>_mean; with k >= 1 the reward role may
        have scored a later chunk too."""
        totals: dict[str, list[float]] = {}
        for terms in per_rank:
            for name, (total, count) in terms.items():
                acc = totals.setdefault(name, [0.0, 0])
                acc[0], acc[1] = acc[0] + total, acc[1] + count
        out = {}
        for name, (total, count) in totals.items():
            seen_total, seen_count = self._terms_seen.get(name, (0.0, 0))
            if count < seen_count:  # a reward rank restarted and counts from 0 again
                seen_total, seen_count = 0.0, 0
            if count > seen_count:
                out[f"reward/{name}_mean"] = (total - seen_total) / (count - seen_count)
            self._terms_seen[name] = (total, count)
        return out

    def write(self, line: dict, histograms: dict[str, torch.Tensor] | None = None) -> dict:
        line = {"wall_s": time.time() - self.t_start, **line, **self.role_stats()}
        self.signal.observe(line)
        line.pop("reward/first_error", None)
        warnings = self.signal.warnings(current_step=line["step"])
        if warnings:  # a run that cannot learn says so on every line while it lasts
            line["warnings"] = warnings
        if line.get("trainer/wall_s"):
            line["trainer/busy_frac"] = line.get("trainer/busy_s", 0.0) / line["trainer/wall_s"]
        line.update(self.pipeline_idle())
        self._file.write(json.dumps(line) + "\n")
        self.control.set_json("metrics/latest", line)
        for sink in (self.tb, self.wandb):
            if sink is not None:
                sink.write(line, histograms)
        return line

    def pipeline_idle(self) -> dict:
        """Share of the RL window so far in which the trainer and the generator both idled."""
        if self.rl_start is None:
            return {}
        spans = self.timelines.read()
        if self.timelines.roles_seen() != {"trainer", "generator"}:
            return {}
        return {"pipeline/both_idle_frac": both_idle_frac(spans, ("trainer", "generator"),
                                                          self.rl_start, time.time())}

    def close(self) -> None:
        self._file.close()
        for sink in (self.tb, self.wandb):
            if sink is not None:
                sink.close()


class TrainedExamplesLog:
    """trained_examples.jsonl: {"step", "policy_version", "example_ids"} per trainer step, the
    audit trail of which prompts each step trained (a resumed run must not lose or repeat any)."""

    def __init__(self, run_dir: str):
        self._file = open(os.path.join(run_dir, "trained_examples.jsonl"), "a", buffering=1)

    def write(self, step: int, policy_version: int, example_ids: list[int]) -> None:
        self._file.write(json.dumps({"step": step, "policy_version": policy_version,
                                     "example_ids": example_ids}) + "\n")

    def close(self) -> None:
        self._file.close()


class TrainedSamplesLog:
    """trained_samples.jsonl: the first `logging.trained_samples_per_step` rows of trainer rank
    0's batch at every step, {"step", "policy_version", "example_id", "completion", "reward"}:
    the completions as the reward role decoded and scored them, so `reward/mean` can be
    checked against the reward function (with every row of the batch, it is their mean).
    With `episodes` (env.enabled) a row adds "turns" and "episode": the prompt and completion
    as the trainer sees them, from the row's tokens and loss mask, every masked span (the
    environment's tokens) written `⟦env: ...⟧` (`Episode.render`); `llamarl data
    --episodes RUN_DIR` prints them."""

    def __init__(self, run_dir: str, rows_per_step: int, tokenizer, episodes: bool = False):
        self.rows_per_step, self.tokenizer, self.episodes = rows_per_step, tokenizer, episodes
        self._file = open(os.path.join(run_dir, "trained_samples.jsonl"), "a", buffering=1)

    def write(self, step: int, policy_version: int, batch) -> None:
        for r in range(min(self.rows_per_step, batch.num_rows)):
            p, c = int(batch.prompt_lens[r]), int(batch.completion_lens[r])
            row = {"step": step, "policy_version": policy_version, "example_id": int(batch.example_ids[r]),
                   "completion": self.tokenizer.decode(batch.tokens[r, p:p + c].tolist()),
                   "reward": float(batch.rewards[r])}
            if self.episodes:
                tokens = batch.tokens[r].tolist()
                mask = batch.loss_mask[r, p - 1:p - 1 + c].tolist()  # column t is token t+1's
                row.update(turns=int(batch.turns[r]),
                           episode=episode_from(tokens[:p], tokens[p:p + c], mask).render(self.tokenizer))
            self._file.write(json.dumps(row, ensure_ascii=False) + "\n")

    def close(self) -> None:
        self._file.close()

