"""One RL step whose micro-batches start as its groups arrive (`resources.trainer.stream_groups`).

    StreamedStep(learner)   the step's learning rate; no gradient held yet
    add(groups, staleness)  complete prompt groups as the feed takes them: their rewards,
                            advantages and masks (all per group), the trained rows buffered
    ready() / run_ready()   while >= micro_batch_size trained rows wait: forward and backward of
                            the shortest micro_batch_size of them, the loss times its token count
                            (row count under aggregation=sequence_mean)
    run_waiting()           all waiting rows now, the last micro-batch short: when the feed has
                            nothing new (its `on_idle`), training beats waiting
    finish(batch, ...)      the rest, then every gradient / the step's token (row) count: the
                            gradient `Learner.rl_step` makes on the whole batch, whose micro-batch
                            weights are micro tokens / total tokens, so the same update up to
                            float rounding (tests/unit/test_streamed_step.py); clip, optimizer
                            step, the step's metrics

Why: at k = 1 a step's last groups are its long tail, generated while the trainer, holding all
the others, waits. Started on the others, its forward and backward run under that wait, and the
step ends about a micro-batch after the last group arrives. The total that normalizes the loss
is known only then, hence the scale at the end.

Only for one trainer rank and one update per batch (config/streaming.py: `stream_groups_active`).
With more updates per batch, pi_old and the mini-batch cuts need the whole batch first; with more
trainer ranks each micro-batch is a collective (DDP's all-reduce, FSDP2's gathers), which a rank
could enter while its peer waits for rows from a restarted generator that needs both ranks to
hand it weights first (executors/feeds.py: `wait_for_peers`).
"""
from __future__ import annotations

import time

import torch

from llamarl_core.executors.learner import Learner, add_micro_metrics, completion_targets, model_device
from llamarl_core.wire.rollout import Rollout, concat


class StreamedStep:
    def __init__(self, learner: Learner):
        a = learner.cfg.algorithm
        if a.updates_per_batch * a.mini_batches != 1:
            raise ValueError("a streamed step makes one update per batch: algorithm.updates_per_batch "
                             f"x mini_batches is {a.updates_per_batch * a.mini_batches}")
        self.learner, self.micro = learner, learner.cfg.micro_batch_size
        self.lr = learner.begin_step()
        self.token_mean = a.aggregation == "token_mean"
        # trained rows not yet in a micro-batch, with their advantages, staleness and filter flags
        self.waiting: list[tuple[Rollout, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.waiting_rows = 0
        self.total_tokens, self.total_rows = 0.0, 0   # over every row added, trained or not
        self.prepared: list[tuple[torch.Tensor, ...]] = []  # each add's `Learner.prepare`, for the metrics
        self.sums: dict[str, float] = {}
        self.weight_sum, self.micro_batches, self.compute_s = 0.0, 0, 0.0

    def add(self, groups: Rollout, staleness: torch.Tensor) -> None:
        """Complete prompt groups (rows grouped contiguously) and each row's staleness."""
        t0 = time.perf_counter()
        prepared = self.learner.prepare(groups)
        self.prepared.append(prepared)
        _, advantages, filtered, trained = prepared                                # [n] each
        _, _, mask = completion_targets(groups)
        mask = mask & ~filtered[:, None]                                           # [n, L'-1]
        self.total_tokens += float(mask.sum())
        self.total_rows += int(mask.any(dim=1).sum())
        keep = trained.nonzero().squeeze(1)
        if len(keep):
            self.waiting.append((groups.select(keep), advantages[keep], staleness[keep], filtered[keep]))
            self.waiting_rows += len(keep)
        self.compute_s += time.perf_counter() - t0

    def ready(self) -> bool:
        return self.waiting_rows >= self.micro

    def run_ready(self) -> None:
        """Every full micro-batch of the waiting rows, shortest rows first."""
        while self.ready():
            self._run(self.micro)

    def run_waiting(self) -> None:
        """Every waiting row now, the last micro-batch short if need be (nothing else to do)."""
        while self.waiting_rows:
            self._run(self.micro)

    def finish(self, batch: Rollout, staleness: torch.Tensor) -> dict:
        """The rest of the step once all its groups were added: `batch` and `staleness` are
        the step's whole rows, the groups in the order they were added (for its metrics, as
        `Learner.rl_step` reports them, from what `add` prepared)."""
        self.run_waiting()
        learner, t0 = self.learner, time.perf_counter()
        total = max(1.0, self.total_tokens) if self.token_mean else max(1, self.total_rows)
        if self.micro_batches:
            for p in learner.model.parameters():
                if p.grad is not None:
                    p.grad.div_(total)
        # micro-batch metrics are weighted means either way: unnormalized weights divide out
        update = learner.optimizer_step(self.sums, self.weight_sum, bool(self.micro_batches), record_ratios=True)
        prepared = tuple(torch.cat(parts) for parts in zip(*self.prepared)) if self.prepared else None
        if prepared is not None and len(prepared[0]) != batch.num_rows:
            raise ValueError(f"finish: {batch.num_rows} rows, but {len(prepared[0])} were added")
        batch_metrics = learner.batch_metrics(batch, staleness, self.lr, prepared)
        self.compute_s += time.perf_counter() - t0
        return learner.step_metrics([update], batch_metrics, self.compute_s, staleness)

    def _run(self, n: int) -> None:
        """Forward and backward of the `n` shortest waiting rows (fewer if fewer wait)."""
        t0 = time.perf_counter()
        learner = self.learner
        rows = concat([r for r, *_ in self.waiting])
        advantages, staleness, filtered = (torch.cat([w[i] for w in self.waiting]) for i in (1, 2, 3))
        order = torch.argsort(rows.prompt_lens + rows.completion_lens, stable=True)
        now, later = order[:n], order[n:]
        self.waiting = [(rows.select(later), advantages[later], staleness[later], filtered[later])] if len(later) else []
        self.waiting_rows = len(later)
        micro = rows.select(now)
        tokens, behavior, mask = completion_targets(micro)                         # [m, w], [m, w-1] x2
        mask = mask & ~filtered[now][:, None]
        weight = float(mask.sum()) if self.token_mean else int(mask.any(dim=1).sum())
        device = model_device(learner.model)
        start = learner.first_target(micro, torch.arange(micro.num_rows))
        tokens, behavior, mask_d, adv, stale = (x.to(device) for x in (tokens, behavior, mask, advantages[now],
                                                                       staleness[now]))
        loss, metrics = learner.micro_loss(tokens, behavior, mask_d, adv, stale, None, True, start=start)
        (loss * weight).backward()
        self.weight_sum += weight
        add_micro_metrics(self.sums, metrics, weight)
        self.micro_batches += 1
        self.compute_s += time.perf_counter() - t0
