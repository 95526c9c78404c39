"""The trainer's one RL step: rows in as they arrive, micro-batches, optimizer step(s), metrics.

    TrainStep(learner, early)  the step's learning rate; no gradient held yet
    add(groups, staleness)     complete prompt groups: their rewards, advantages and filter flags
                               (all per group, `Learner.prepare`); the rows kept by reference;
                               kl_in=reward: first a no-grad pass of policy and reference on them
                               (`Learner.kl_in_reward`; the weights move only in `finish`, so
                               per group works early too), its log pi the later pi_old
    run_ready()                early only: while >= micro_batch_size trained rows wait, forward and
                               backward of the shortest micro_batch_size of them
    run_waiting()              early only: all waiting rows now, the last micro-batch short (the
                               feed has nothing new: training beats waiting)
    finish(batch, staleness)   the rest: early, the gradient divided by the step's token (row)
                               count; otherwise pi_old (when updates_per_batch x mini_batches > 1),
                               then each update's micro-batches; clip, optimizer step, metrics

Every micro-batch, early or not, is `_run`: the `n` shortest waiting rows, cut to their longest
row, loss times its token count (row count under aggregation=sequence_mean or length_norm=constant)
over `divisor`.
Without `early` the divisor is the update's count, known before the first backward (data-
parallel ranks all-reduce during backward, so each rank's gradient must be final then). Early,
the count is known only when the last group arrived, hence divisor 1 and the scale in `finish`:
the same update up to float rounding (tests/unit/test_train_step.py).

Why early: at k = 1 a step's last groups are its long tail, generated while the trainer, holding
all the others, waits. Started on the others, their forward and backward run under that wait,
and the step ends about a micro-batch after the last group arrives. When it applies:
config/streaming.py, `stream_groups_active`.

Copies of the rows from arrival to the loss (tests/unit/test_rollout_hops.py counts them): none
on `add`; per micro-batch one stack of the token rows, one of the log-mu rows and one of the
loss-mask rows (slices of the rows as they arrived, already in the loss's layout), then the move to the model's device (none
on CPU); with pi_old, its pass's own stacks and one select of its rows per micro-batch of each
update.
"""
from __future__ import annotations

import time

import torch

from llamarl_core.algorithms.metrics import add_micro_metrics
from llamarl_core.executors.learner import Learner, maybe_no_sync, model_device
from llamarl_core.wire.rollout import Rollout


class TrainStep:
    def __init__(self, learner: Learner, early: bool = False):
        a = learner.cfg.algorithm
        if early and a.updates_per_batch * a.mini_batches != 1:
            raise ValueError("an early (streamed) step makes one update per batch: algorithm.updates_per_batch "
                             f"x mini_batches is {a.updates_per_batch * a.mini_batches}")
        self.learner, self.early, self.micro = learner, early, learner.cfg.micro_batch_size
        self.lr = learner.begin_step()
        # micro-batches weigh by their tokens, or by their rows: under sequence_mean, and under
        # length_norm=constant, whose loss is a token sum over rows x a constant (exact when summed)
        self.token_mean = a.aggregation == "token_mean" and a.length_norm == "tokens"
        self.rows: list[tuple[Rollout, int]] = []  # every row of the step, as (its rollout, its index)
        # per row of the step, [N] each
        self.prompt_lens, self.completion_lens = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        self.model_tokens = torch.zeros(0)  # [N] tokens of each row the model wrote (its loss targets)
        self.advantages, self.staleness = torch.zeros(0), torch.zeros(0)
        self.filtered = torch.zeros(0, dtype=torch.bool)
        self.waiting: list[int] = []  # trained rows (indices into `rows`) not yet in a micro-batch
        self.prepared: list[tuple[torch.Tensor, ...]] = []  # each add's `Learner.prepare`, for the metrics
        self.kl_parts: list[tuple[torch.Tensor, ...]] = []  # kl_in=reward: each add's `Learner.kl_in_reward`
        self.sums: dict[str, float] = {}
        self.weight_sum, self.micro_batches, self.compute_s = 0.0, 0, 0.0

    def add(self, groups: Rollout | list[Rollout], staleness: torch.Tensor) -> None:
        """Complete prompt groups (rows grouped contiguously; a list: as the feed took them, not
        concatenated) and each row's staleness, in the same order."""
        if isinstance(groups, list):
            for part, stale in zip(groups, torch.split(staleness, [g.num_rows for g in groups])):
                self.add(part, stale)
            return
        t0 = time.perf_counter()
        kl = self.learner.kl_in_reward(groups) if self.learner.cfg.algorithm.kl_in == "reward" else None
        prepared = self.learner.prepare(groups, None if kl is None else kl[0])
        if kl is not None:
            self.kl_parts.append(kl)
        self.prepared.append(prepared)
        _, advantages, filtered, trained = prepared                                # [n] each
        first = len(self.rows)
        self.rows += [(groups, r) for r in range(groups.num_rows)]
        for name, value in (("prompt_lens", groups.prompt_lens), ("completion_lens", groups.completion_lens),
                            ("model_tokens", groups.loss_mask.sum(dim=1)), ("advantages", advantages), ("staleness", staleness), ("filtered", filtered)):
            setattr(self, name, torch.cat([getattr(self, name), value]))          # [N] per-row numbers
        if self.early:
            self.waiting += (trained.nonzero().squeeze(1) + first).tolist()
        self.compute_s += time.perf_counter() - t0

    def run_ready(self) -> None:
        """Every full micro-batch of the waiting rows, shortest rows first."""
        while len(self.waiting) >= self.micro:
            self._run(self.micro)

    def run_waiting(self, divisor: float = 1.0, old=None, record_ratios: bool = True) -> None:
        """Every waiting row now, the last micro-batch short if need be."""
        while self.waiting:
            self._run(self.micro, divisor, old, record_ratios, last=len(self.waiting) <= self.micro)

    def finish(self, batch: Rollout, staleness: torch.Tensor) -> dict:
        """The rest of the step once all its groups were added: `batch` and `staleness` are the
        step's whole rows, the groups in the order they were added (for its metrics)."""
        learner, t0 = self.learner, time.perf_counter()
        if len(self.rows) != batch.num_rows:
            raise ValueError(f"finish: {batch.num_rows} rows, but {len(self.rows)} were added")
        prepared = tuple(torch.cat(parts) for parts in zip(*self.prepared)) if self.prepared else None
        counts = self.model_tokens * ~self.filtered                               # [N] tokens in the loss
        if not self.token_mean:
            counts = (counts > 0).float()                                         # [N] rows with any
        if self.early:
            self.run_waiting()
            if self.micro_batches:
                for p in learner.model.parameters():
                    if p.grad is not None:
                        p.grad.div_(max(1.0, float(counts.sum())))
            # micro-batch metrics are weighted means either way: unnormalized weights divide out
            updates = [learner.optimizer_step(self.sums, self.weight_sum, bool(self.micro_batches), True)]
        else:
            a, n = learner.cfg.algorithm, len(self.rows)
            trained = prepared[3] if prepared else torch.zeros(0, dtype=torch.bool)
            # pi_old: the policy before this batch's first update, the anchor of every later ratio;
            # with one update per batch it is the update's own forward, so it is not recomputed
            old = self._old_logprobs(trained) if a.updates_per_batch * a.mini_batches > 1 else None
            updates = []
            for _ in range(a.updates_per_batch):
                for rows in torch.tensor_split(torch.arange(n), a.mini_batches):  # contiguous row ranges
                    self.waiting = rows[trained[rows]].tolist()
                    self.sums, self.weight_sum, self.micro_batches = {}, 0.0, 0
                    self.run_waiting(max(1.0, float(counts[rows].sum())), old, record_ratios=not updates)
                    updates.append(learner.optimizer_step(self.sums, self.weight_sum, bool(self.micro_batches),
                                                          record_ratios=not updates))
        kl_reward = ((torch.cat([k[0] for k in self.kl_parts]), sum(k[1] for k in self.kl_parts))
                     if self.kl_parts else None)
        batch_metrics = learner.batch_metrics(batch, staleness, self.lr, prepared, kl_reward)
        self.compute_s += time.perf_counter() - t0
        return learner.step_metrics(updates, batch_metrics, self.compute_s, staleness)

    def _take(self, n: int) -> tuple[list[int], int]:
        """The `n` shortest waiting rows (fewer if fewer wait), out of `waiting`, and their width."""
        lengths = self.prompt_lens + self.completion_lens                          # [N]
        if not self.learner.length_sorted:
            now, self.waiting = self.waiting[:n], self.waiting[n:]
            return now, int(lengths.max())
        order = torch.argsort(lengths[self.waiting], stable=True).tolist()
        now = [self.waiting[i] for i in order[:n]]
        self.waiting = [self.waiting[i] for i in order[n:]]
        return now, int(lengths[now].max())

    def _inputs(self, ids: list[int], width: int):
        """A micro-batch's tokens [m, w], log mu [m, w-1] and loss mask [m, w-1] (host memory)."""
        rows = [self.rows[j] for j in ids]
        tokens = torch.stack([r.tokens[i, :width] for r, i in rows])                       # [m, w]
        behavior = torch.stack([r.behavior_logprobs[i, :width - 1] for r, i in rows])      # [m, w-1]
        mask = torch.stack([r.loss_mask[i, :width - 1] for r, i in rows]) > 0               # [m, w-1]
        mask &= ~self.filtered[ids][:, None]
        return tokens, behavior, mask

    def _run(self, n: int, divisor: float = 1.0, old=None, record_ratios: bool = True, last: bool = True) -> None:
        """Forward and backward of the `n` shortest waiting rows."""
        t0 = time.perf_counter()
        learner = self.learner
        ids, width = self._take(n)
        tokens, behavior, mask = self._inputs(ids, width)
        weight = float(mask.sum()) if self.token_mean else int(mask.any(dim=1).sum())
        start = learner.first_target(self.prompt_lens[ids])
        device = model_device(learner.model)
        tokens, behavior, mask_d, adv, stale = (x.to(device) for x in (
            tokens, behavior, mask, self.advantages[ids], self.staleness[ids]))
        o = None if old is None else old[ids, :width - 1]
        with maybe_no_sync(learner.model, last):
            loss, metrics = learner.micro_loss(tokens, behavior, mask_d, adv, stale, o, record_ratios, start=start)
            (loss * (weight / divisor)).backward()
        self.weight_sum += weight
        add_micro_metrics(self.sums, metrics, weight)
        self.micro_batches += 1
        self.compute_s += time.perf_counter() - t0

    @torch.no_grad()
    def _old_logprobs(self, trained: torch.Tensor) -> torch.Tensor:
        """log pi_old [N, L'-1] of the trained rows under the weights before any update."""
        learner = self.learner
        width = int((self.prompt_lens + self.completion_lens).max()) if self.rows else 1  # none: dynamic sampling
        old = torch.zeros(len(self.rows), width - 1, device=model_device(learner.model))  # [N, L'-1]
        if self.kl_parts:  # kl_in=reward ran this pass already, on every row, before any update
            first = 0
            for _, _, part in self.kl_parts:
                old[first:first + len(part), :part.shape[1]] = part.to(old.device)
                first += len(part)
            return old
        self.waiting = trained.nonzero().squeeze(1).tolist()
        while self.waiting:
            ids, w = self._take(self.micro)
            tokens = self._inputs(ids, w)[0].to(old.device)                       # [m, w]
            start = learner.first_target(self.prompt_lens[ids])
            logprobs, _, _ = learner.model(tokens, head=learner._head(tokens[:, 1:], start=start, inputs=tokens))
            old[ids, :w - 1] = logprobs.float()
        return old


def train_on(learner: Learner, batch: Rollout, staleness: torch.Tensor) -> dict:
    """One step on a whole batch (every row at once): what the trainer does without early micro-batches."""
    step = TrainStep(learner)
    step.add(batch, staleness)
    return step.finish(batch, staleness)

