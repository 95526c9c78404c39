"""One RL step trained while its groups arrive: the trainer's forward/backward starts on the first
complete groups instead of waiting for the last (executors/feeds.py hands them over as they are
taken, `RewardFeed.collect(..., on_groups=...)`).

    groups taken ──▶ add(rows, staleness)      prepared (rewards, advantages, masks) at once;
                                               every full micro-batch of trained rows waiting
                                               runs its forward and backward now
    the step's last group ──▶ finish()         the rest as micro-batches, then one optimizer step

The arithmetic is `Learner.rl_step`'s with one update: a micro-batch's loss is weighted by its
share of the step's tokens (rows), and that total is known only at the end, so each backward
takes the loss times the micro-batch's own tokens (rows) and the summed gradient is divided by
the total before clipping (the same sum, in another order). What changes is which rows share a
micro-batch (length-sorted among those waiting, not among all) and when it runs.

Only where no collective runs per micro-batch and the step is one optimizer update
(`Learner.streams_steps`): a data-parallel rank could enter a micro-batch's collective while a
peer still waits for rows (feeds.wait_for_peers keeps that from happening), and several
updates need the whole batch's π_old first.
"""
from __future__ import annotations

import math
import time

import torch

from llamarl_core.algorithms import compute_advantages, importance_metrics
from llamarl_core.algorithms.dynamic_sampling import uniform_groups_frac
from llamarl_core.algorithms.metrics import as_float
from llamarl_core.algorithms.overlong import training_rewards, truncated_rows
from llamarl_core.executors.learner import MAX_METRICS, SUM_METRICS, _mean, completion_targets
from llamarl_core.wire.rollout import Rollout, concat


class StreamedStep:
    def __init__(self, learner):
        self.learner = learner
        a = learner.cfg.algorithm
        self.lr = learner.learning_rate()
        for group in learner.optimizer.param_groups:
            group["lr"] = self.lr
        learner.steps_done += 1
        learner._ratios = []
        self.t0 = time.perf_counter()
        self.token_mean = a.aggregation == "token_mean"
        self.parts: list[tuple[Rollout, torch.Tensor]] = []    # (rows, staleness) as added
        self.waiting: list[dict] = []                           # prepared parts not yet run
        self.sums: dict[str, float] = {}
        self.weight_sum = 0.0          # sum of micro-batch weights (tokens or rows), unnormalized
        self.trained = []              # [n] bool per part: rows run (skipped: zero advantage)
        self.rewards, self.advantages, self.filtered = [], [], []
        self.ran = 0                   # micro-batches run
        self.finished = False

    # ---- arrivals -----------------------------------------------------------------------
    def add(self, rows: Rollout, staleness: torch.Tensor) -> None:
        """Whole groups of the step; runs every full micro-batch of trained rows now waiting."""
        if rows.num_rows == 0:
            return
        self.parts.append((rows, staleness))
        self.waiting.append(self._prepare(rows, staleness))
        micro = self.learner.cfg.micro_batch_size
        while sum(int(p["trained"].sum()) for p in self.waiting) >= micro:
            self._run(self._merged(), micro, full_only=True)

    def _prepare(self, rows: Rollout, staleness: torch.Tensor) -> dict:
        learner, a, gen = self.learner, self.learner.cfg.algorithm, self.learner.cfg.generation
        rewards = training_rewards(rows.rewards, rows.completion_lens, a.overlong, gen.max_new_tokens,
                                   a.overlong_buffer_tokens)
        advantages = compute_advantages(rewards, a.group_size, a.advantage)
        n = rows.num_rows
        filtered = (truncated_rows(rows.tokens, rows.prompt_lens, rows.completion_lens, gen.max_new_tokens,
                                   learner.eos_ids) if a.overlong == "filter" else torch.zeros(n, dtype=torch.bool))
        trained = ((advantages != 0) & ~filtered if learner.skip_zero_advantage
                   else torch.ones(n, dtype=torch.bool))
        self.rewards.append(rewards)
        self.advantages.append(advantages)
        self.filtered.append(filtered)
        self.trained.append(trained)
        return {"rows": rows, "staleness": staleness, "advantages": advantages, "filtered": filtered,
                "trained": trained}

    def _merged(self) -> dict:
        """The waiting parts as one (rows padded to the longest), then nothing waits."""
        parts, self.waiting = self.waiting, []
        if len(parts) == 1:
            return parts[0]
        return {"rows": concat([p["rows"] for p in parts]),
                "staleness": torch.cat([p["staleness"] for p in parts]),
                **{k: torch.cat([p[k] for p in parts]) for k in ("advantages", "filtered", "trained")}}

    def _run(self, part: dict, micro: int, full_only: bool) -> None:
        """Forward and backward of `part`'s trained rows in length-sorted micro-batches; with
        `full_only`, rows short of a full micro-batch go back to wait."""
        learner, rows = self.learner, part["rows"]
        tokens, behavior, mask = completion_targets(rows)
        mask = mask & ~part["filtered"][:, None]
        host_mask = mask
        has_tokens = host_mask.any(dim=1)
        batches = list(learner._micro_batches(rows, micro, part["trained"]))
        if full_only and batches and len(batches[-1][0]) < micro:
            rest = batches.pop()[0]
            keep = torch.zeros(rows.num_rows, dtype=torch.bool)
            keep[rest] = True
            self.waiting.append({"rows": rows.select(rest), "staleness": part["staleness"][rest],
                                 "advantages": part["advantages"][rest], "filtered": part["filtered"][rest],
                                 "trained": part["trained"][rest]})
        if not batches:
            return
        device = next(learner.model.parameters()).device
        tokens, behavior, mask, advantages, staleness = (
            x.to(device) for x in (tokens, behavior, mask, part["advantages"], part["staleness"]))
        for idx, width in batches:
            t, b, m = tokens[idx, :width], behavior[idx, :width - 1], mask[idx, :width - 1]
            loss, metrics = learner._micro_loss(t, b, m, advantages[idx], staleness[idx], None, True,
                                                start=learner._first_target(rows, idx))
            weight = (float(host_mask[idx, :width - 1].sum()) if self.token_mean
                      else float(has_tokens[idx].sum()))
            (loss * weight).backward()
            self.weight_sum += weight
            self.ran += 1
            for k, v in metrics.items():
                if k in MAX_METRICS:
                    self.sums[k] = max(self.sums.get(k, -math.inf), v)
                elif k in SUM_METRICS:
                    self.sums[k] = self.sums.get(k, 0.0) + v
                else:
                    self.sums[k] = self.sums.get(k, 0.0) + v * weight

    # ---- the end of the step ------------------------------------------------------------
    def finish(self) -> dict:
        """The rest of the rows, then the optimizer step; returns `Learner.rl_step`'s metrics."""
        learner, a = self.learner, self.learner.cfg.algorithm
        if self.finished:
            raise RuntimeError("StreamedStep.finish() called twice")
        self.finished = True
        if self.waiting:
            self._run(self._merged(), learner.cfg.micro_batch_size, full_only=False)
        batch = concat([r for r, _ in self.parts]) if self.parts else None
        staleness = torch.cat([s for _, s in self.parts]) if self.parts else torch.zeros(0)
        rewards = torch.cat(self.rewards) if self.rewards else torch.zeros(0)
        advantages = torch.cat(self.advantages) if self.advantages else torch.zeros(0)
        trained = torch.cat(self.trained) if self.trained else torch.zeros(0, dtype=torch.bool)
        n = int(staleness.numel())
        # total tokens (rows) of the update, as rl_step counts them: every row's, trained or not
        if batch is not None:
            _, _, mask = completion_targets(batch)
            mask = mask & ~torch.cat(self.filtered)[:, None]
            total = (max(1.0, float(mask.sum())) if self.token_mean
                     else float(max(1, int(mask.any(dim=1).sum()))))
        else:
            total = 1.0
        sums = {k: v if k in MAX_METRICS + SUM_METRICS else v / max(self.weight_sum, 1e-12)
                for k, v in self.sums.items()}
        if self.ran == 0:  # zero gradients, so Adam's momentum and weight decay step as before
            low, high = a.clip_range()
            sums = {**importance_metrics(torch.ones(0, 0), torch.zeros(0, 0), a.rho, low, clip_eps_high=high),
                    "loss": 0.0}
            learner._ratios.append(torch.ones(0))
            for p in learner.model.parameters():
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        else:
            for p in learner.model.parameters():
                if p.grad is not None:
                    p.grad.div_(total)
        grad_norm = torch.nn.utils.clip_grad_norm_(learner.model.parameters(), a.grad_clip)
        learner.optimizer.step()
        learner.optimizer.zero_grad(set_to_none=True)
        sums["grad_norm"] = as_float(grad_norm)
        sums["tokens_total"] = sums.pop("tokens", 0.0)
        metrics = dict(
            staleness_mean=_mean(staleness), staleness_max=float(staleness.max()) if n else 0.0,
            lr=self.lr, reward_mean=_mean(batch.rewards) if batch is not None else 0.0,
            advantage_abs_mean=_mean(advantages.abs()),
            completion_tokens=float(batch.completion_lens.sum()) if batch is not None else 0.0,
            trained_rows_frac=_mean(trained), uniform_groups_frac=uniform_groups_frac(rewards, a.group_size))
        if a.overlong == "penalty":
            metrics["overlong_penalty_mean"] = _mean(rewards - batch.rewards) if batch is not None else 0.0
        if a.overlong == "filter":
            metrics["overlong_filtered_frac"] = _mean(torch.cat(self.filtered)) if self.filtered else 0.0
        sums.update(metrics, tokens_per_s=metrics["completion_tokens"] / (time.perf_counter() - self.t0))
        learner.histograms = {"trainer/is_ratio": torch.cat(learner._ratios), "trainer/staleness": staleness}
        return sums
