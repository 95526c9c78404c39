"""One optimizer step of RL (AIPO and variants); the warm start's is sft/warmstart.py's `WarmStart`.

Plain PyTorch on a model that may be wrapped for data parallelism by the runtime (DDP or
FSDP2): this module never imports torch.distributed. The trainer recomputes log π on the
exact tokens the generator sampled, under the generator's sampling distribution (repetition
penalty, temperature, min-p, top-k, top-p: `generation.sampling`), so that with equal weights π/μ = 1.

With LoRA (models/lora.py) the optimizer holds only the adapters, and the KL reference is free:
the same module run with its adapters off (`adapters_disabled`), no second model. That forward
is a plain forward of the wrapped module, so FSDP2's gathers and DDP's hooks run on every rank
alike.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Optional

import torch

from llamarl_core.algorithms import aipo_loss, compute_advantages, importance_metrics
from llamarl_core.algorithms.dynamic_sampling import uniform_groups_frac
from llamarl_core.algorithms.kl import kl_reward_penalty
from llamarl_core.algorithms.lr_schedule import lr_at
from llamarl_core.algorithms.metrics import MAX_METRICS, SUM_METRICS, as_float, combine_updates
from llamarl_core.algorithms.nonfinite import NonFiniteGuard
from llamarl_core.algorithms.optimizer import policy_optimizer
from llamarl_core.algorithms.overlong import training_rewards, truncated_rows
from llamarl_core.config.schema import AlgorithmConfig, GenerationConfig, TrainerSettings
from llamarl_core.generation.sampling import chunked_policy_logprobs, first_positions
from llamarl_core.models.lora import adapters_disabled, has_lora, trainable_parameters
from llamarl_core.wire.rollout import Rollout


@dataclass(frozen=True)
class LearnerConfig:
    """What the learner reads of the run (built by executors/pipeline.py: `learner_config`)."""

    algorithm: AlgorithmConfig
    generation: GenerationConfig  # how the behaviour policy sampled: temperature, top-k/p, max_new_tokens
    micro_batch_size: int         # resources.trainer.micro_batch_size: sequences per forward/backward
    max_steps: int                # run.max_steps: the length of the LR schedule
    stream_groups: bool = False   # micro-batches as groups arrive (config/streaming.py, train_step.py)
    max_nonfinite_steps: int = TrainerSettings.max_nonfinite_steps  # skipped steps in a row before the run stops
    adam_betas: Optional[tuple] = None  # trainer.adam_betas (None: algorithms/optimizer.py's default)
    adam_eps: float = TrainerSettings.adam_eps  # trainer.adam_eps


def completion_targets(batch: Rollout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens [N, L'], behavior log μ [N, L'-1], mask [N, L'-1]) aligned to next-token targets:
    views of the rollout's rows (log μ and the mask are stored at their targets, wire/rollout.py)."""
    length = int((batch.prompt_lens + batch.completion_lens).max()) if batch.num_rows else 1
    return (batch.tokens[:, :length], batch.behavior_logprobs[:, :length - 1],
            batch.loss_mask[:, :length - 1] > 0)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's (first) parameters: where its inputs go."""
    return next(model.parameters()).device


def maybe_no_sync(model, last: bool):
    return contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()


class Learner:
    """The pieces of an RL step (executors/train_step.py runs it). Where each knob of `algorithm` acts:

        rewards      overlong=penalty adds DAPO's length penalty   (algorithms/overlong.py);
                     kl_in=reward subtracts kl_coef * sum_t k(pi_old, ref)_t  (kl_in_reward)
        advantages   group-relative, `advantage`                   (algorithms/advantages.py)
        mask         overlong=filter drops truncated rows' tokens
        lr           warm-up, then `lr_schedule`                    (algorithms/lr_schedule.py)
        pi_old       one no-grad forward, when updates_per_batch x mini_batches > 1  (train_step.py)
        updates      updates_per_batch passes x mini_batches optimizer steps, each one
                     length-sorted micro-batches with gradient accumulation  (train_step.py)
        loss         aipo_loss: `name`, rho, clip range, KL, mismatch, entropy (algorithms/aipo.py)
    """

    def __init__(self, model: torch.nn.Module, cfg: LearnerConfig, ref_model: torch.nn.Module | None = None,
                 data_parallel: bool = False, eos_ids: tuple[int, ...] = ()):
        self.model, self.cfg, self.ref_model = model, cfg, ref_model
        a = cfg.algorithm
        raw = getattr(model, "module", model)  # under DDP the wrapped module
        # LoRA: the reference is this model with its adapters off (ref_model unused, not built)
        self.lora_reference = raw if has_lora(raw) and a.kl_coef > 0 else None
        self.params = trainable_parameters(model)  # with LoRA: the adapters only
        # A row whose advantage is exactly 0 (its whole group scored alike) adds exactly 0 to
        # every loss kind's gradient unless a KL or entropy term is on, so one trainer rank
        # skips its forward and backward. Data-parallel ranks run the same number of
        # micro-batches (each is a collective), so they keep every row.
        self.skip_zero_advantage = not data_parallel and a.kl_coef == 0 and a.entropy_coef == 0
        # A non-finite update is skipped (algorithms/nonfinite.py). Data-parallel ranks decide on
        # the grad norm alone, which the all-reduce made the same on every rank: a rank's own loss
        # could differ, and ranks that disagree on stepping would hold different weights.
        self.data_parallel = data_parallel
        self.nonfinite = NonFiniteGuard(cfg.max_nonfinite_steps)
        self._skipped_updates = 0  # of the current step
        if a.overlong == "filter" and not eos_ids:
            raise ValueError("algorithm.overlong=filter needs the tokenizer's eos_ids to tell a truncated "
                             "completion from one that ended at the limit")
        self.eos_ids = eos_ids
        # fused: one kernel over every parameter (CPU and CUDA; 0.15 s instead of 0.6 s a step
        # for the 135M real model on one CPU thread, same arithmetic within an fp32 ulp)
        self.optimizer = policy_optimizer(self.params, a.lr, a.weight_decay, "rl", cfg.adam_betas,
                                          cfg.adam_eps, fused=_fusable(self.params))
        g = cfg.generation  # temperature > 0: the config refuses greedy RL (no behaviour policy)
        self.temperature, self.top_k, self.top_p = g.temperature, g.top_k, g.top_p
        self.min_p, self.repetition_penalty = g.min_p, g.repetition_penalty
        self.steps_done = 0  # RL steps: the LR schedule's position (state.json's lr_steps)
        # micro-batches of similar lengths (train_step.py); `False`: the old layout, every micro-batch
        # padded to the step's longest row, for `llamarl bench trainer`
        self.length_sorted = True
        # The output head (and its log-softmax over the vocabulary) runs only from a micro-batch's
        # first completion position: prompt positions are never in the loss. `False` is the old
        # layout (every position), for the test that compares the two.
        self.head_from_completion = True
        self.histograms: dict[str, torch.Tensor] = {}

    def learning_rate(self) -> float:
        """Adam's first updates are sign-like and large; a short warm-up keeps them from undoing
        the warm start before its moment estimates settle. Then the schedule, over run.max_steps."""
        a = self.cfg.algorithm
        return lr_at(self.steps_done, a.lr, a.lr_warmup_steps, self.cfg.max_steps, a.lr_schedule,
                     a.min_lr_ratio)

    def begin_step(self) -> float:
        """An RL step starts: its learning rate set (and returned), the schedule moved on, no
        pi/mu recorded yet (executors/train_step.py)."""
        lr = self.learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.steps_done += 1
        self._ratios = []
        self._skipped_updates = 0
        return lr

    def step_metrics(self, updates: list[dict], batch_metrics: dict, compute_s: float,
                     staleness: torch.Tensor) -> dict:
        """The step's metrics from its updates' and its batch's; sets the histograms."""
        sums = combine_updates(updates)
        self.nonfinite.end_step(self.steps_done, self._skipped_updates > 0)  # raises on the limit
        sums["nonfinite_steps"] = float(self.nonfinite.total)
        sums["tokens_total"] = sums.pop("tokens")  # every trained token of every update of the step
        sums.update(batch_metrics, tokens_per_s=batch_metrics["completion_tokens"] / max(compute_s, 1e-9))
        # For TensorBoard's histograms: every counted token's pi/mu (before the batch's first
        # update) and every row's staleness.
        self.histograms = {"trainer/is_ratio": torch.cat(self._ratios), "trainer/staleness": staleness}
        return sums

    def prepare(self, batch: Rollout, kl_penalty: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per row of whole groups: (training rewards, advantages, filtered by overlong=filter,
        trained: not skipped for a zero advantage), all [N] and all computed per group.
        `kl_penalty` [N]: kl_in=reward's (`kl_in_reward`), subtracted before the advantages."""
        a, gen = self.cfg.algorithm, self.cfg.generation
        rewards = training_rewards(batch.rewards, batch.completion_lens, a.overlong, gen.max_new_tokens,
                                   a.overlong_buffer_tokens)                       # [N]
        if kl_penalty is not None:
            rewards = rewards - kl_penalty.to(rewards.dtype)                       # [N]
        advantages = compute_advantages(rewards, a.group_size, a.advantage)       # [N]
        n = batch.num_rows
        filtered = (truncated_rows(batch.tokens, batch.prompt_lens, batch.completion_lens, gen.max_new_tokens,
                                   self.eos_ids) if a.overlong == "filter" else torch.zeros(n, dtype=torch.bool))
        trained = ((advantages != 0) & ~filtered if self.skip_zero_advantage
                   else torch.ones(n, dtype=torch.bool))                           # [N]
        return rewards, advantages, filtered, trained

    def batch_metrics(self, batch: Rollout, staleness: torch.Tensor, lr: float, prepared=None,
                      kl_reward=None) -> dict:
        """The step's metrics of its rows, trained or not (staleness is the batch's property);
        `prepared`: `prepare(batch)` when the caller has it already; `kl_reward`: kl_in=reward's
        (penalty [N], [masked KL sum, token count]) of the same rows."""
        a = self.cfg.algorithm
        rewards, advantages, filtered, trained = prepared or self.prepare(batch)
        n = batch.num_rows
        out = dict(
            staleness_mean=_mean(staleness), staleness_max=float(staleness.max()) if n else 0.0,
            lr=lr, reward_mean=_mean(batch.rewards), advantage_abs_mean=_mean(advantages.abs()),
            completion_tokens=float(batch.completion_lens.sum()), trained_rows_frac=_mean(trained),
            uniform_groups_frac=uniform_groups_frac(rewards, a.group_size))
        penalty = torch.zeros_like(rewards) if kl_reward is None else kl_reward[0].to(rewards.dtype)  # [N]
        if kl_reward is not None:
            out["kl_reward_penalty_mean"] = _mean(penalty)
            out["kl"] = as_float(kl_reward[1][0] / kl_reward[1][1].clamp(min=1.0))
        if a.overlong == "penalty":
            out["overlong_penalty_mean"] = _mean(rewards + penalty - batch.rewards)
        if a.overlong == "filter":
            out["overlong_filtered_frac"] = _mean(filtered)
        return out

    def optimizer_step(self, sums: dict, weight_sum: float, trained_any: bool, record_ratios: bool) -> dict:
        """Clip, step and zero the gradients the micro-batches left; returns the update's metrics
        from the micro-batch `sums` (algorithms/metrics.py: add_micro_metrics) and the sum of their weights."""
        a = self.cfg.algorithm
        # Metrics are means over the rows that were trained (all rows unless skipped); with
        # none (every group scored alike) they are importance_metrics' values for no tokens.
        sums = {k: v if k in MAX_METRICS + SUM_METRICS else v / max(weight_sum, 1e-12) for k, v in sums.items()}
        if not trained_any:  # zero gradients, so Adam's momentum and weight decay step as before
            low, high = a.clip_range()
            sums = {**importance_metrics(torch.ones(0, 0), torch.zeros(0, 0), a.rho, low, clip_eps_high=high),
                    "loss": 0.0}
            if record_ratios:
                self._ratios.append(torch.ones(0))
            for p in self.params:
                p.grad = torch.zeros_like(p)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, a.grad_clip)
        sums["grad_norm"] = as_float(grad_norm)
        finite = math.isfinite(sums["grad_norm"]) and (self.data_parallel or math.isfinite(sums.get("loss", 0.0)))
        if finite:
            self.optimizer.step()
        else:  # a NaN/inf would reach every weight (and Adam's moments): skip, counted per step
            self._skipped_updates += 1
        self.optimizer.zero_grad(set_to_none=True)
        return sums

    def _reference(self):
        """The KL reference as a context: the separate frozen model, or with LoRA the trained
        module (wrapped as it is) with its adapters switched off for the block."""
        if self.lora_reference is None:
            return contextlib.nullcontext(self.ref_model)
        return _disabled(self.model, self.lora_reference)

    def first_target(self, prompt_lens: torch.Tensor) -> int:
        """The first target position rows with these prompt lengths count (their first completion
        token's), 0 with `head_from_completion` off. Host numbers: no device sync."""
        if not self.head_from_completion or not len(prompt_lens):
            return 0
        return max(0, int(prompt_lens.min()) - 1)

    def _head(self, targets: torch.Tensor, entropy: bool = False, sampling: bool = True, start: int = 0,
              untruncated: bool = False, inputs: Optional[torch.Tensor] = None):
        """The model's `head`: log-probs of `targets` [m, w-1] (and the entropy, and with
        `untruncated` their untruncated log-probs: `chunked_policy_logprobs`) chunk by chunk
        from the hidden states, never the [m, L'-1, V] logits (generation.sampling). Positions
        before `start` are not computed: they come back as zeros (no gradient), which the loss's
        mask never counts. At 45 prompt and 18 completion tokens that is 1.3x faster a
        micro-batch of the real model (the head is a quarter of its FLOPs, run three times:
        forward, recomputed, backward). With a repetition penalty, `inputs` [m, w] are the whole
        rows (prompt and completion): each position's seen tokens."""
        top_k, top_p = (self.top_k, self.top_p) if sampling else (0, 1.0)
        min_p, penalty = (self.min_p, self.repetition_penalty) if sampling else (0.0, 1.0)

        def head(h, output):
            seen_from = None
            if penalty != 1.0:  # hidden position i (absolute start + i) has seen inputs[:, :start + i + 1]
                seen_from = first_positions(inputs, output.weight.shape[0]) - start  # [m, V]
            out = chunked_policy_logprobs(h[:, start:-1], output, targets[:, start:], self.temperature,
                                          top_k, top_p, entropy, untruncated, min_p=min_p,
                                          repetition_penalty=penalty, seen_from=seen_from)
            pad = lambda x: x if x is None or not start else torch.nn.functional.pad(x, (start, 0))  # noqa: E731
            return tuple(pad(x) for x in out)
        return head

    @torch.no_grad()
    def kl_in_reward(self, groups: Rollout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """kl_in=reward: per row, kl_coef * sum_t k(pi_old, ref)_t over its counted tokens [n]
        (pi_old: these weights, before the step's first update: the trainer steps only after
        every group was added), the [masked KL sum, token count] and log pi_old [n, L'-1] under
        the sampling distribution (train_step.py reuses it as the pi_old pass). Both sides of
        the KL untruncated, as in the loss (`micro_loss`)."""
        a = self.cfg.algorithm
        tokens, _, mask = completion_targets(groups)                               # [n, L'], [n, L'-1]
        truncated = self.cfg.generation.changes_distribution()
        device = model_device(self.model)
        penalty, sums, old = torch.zeros(groups.num_rows), torch.zeros(2), torch.zeros(mask.shape)
        for rows in torch.split(torch.arange(groups.num_rows), self.cfg.micro_batch_size):
            t = tokens[rows].to(device)                                            # [m, L']
            start = self.first_target(groups.prompt_lens[rows])
            with self._reference() as ref_model:
                ref, _, _ = ref_model(t, head=self._head(t[:, 1:], sampling=False, start=start))
            logprobs, _, whole = self.model(t, head=self._head(t[:, 1:], start=start, untruncated=truncated,
                                                                      inputs=t))
            policy = whole if truncated else logprobs                              # [m, L'-1]
            p, s = kl_reward_penalty(policy, ref, mask[rows].to(device), a.kl_estimator, a.kl_coef)
            penalty[rows], sums, old[rows] = p.cpu(), sums + s.cpu(), logprobs.float().cpu()
        return penalty, sums, old

    def micro_loss(self, tokens, behavior, mask, advantages, staleness, old=None, record_ratios=True,
                   start: int = 0):
        """One micro-batch's loss (before any scaling by its share of the step) and its metrics; the
        step's every micro-batch (executors/train_step.py) calls it.

        The KL to the reference is defined on softmax(logits / T) without top-k/top-p on both
        sides (as TRL and veRL do): the reference is scored untruncated, and so is the policy's
        side of the KL, from the same hidden states, while π/μ keeps the sampling distribution."""
        a = self.cfg.algorithm
        kl = a.kl_coef > 0 and a.kl_in == "loss" and (self.ref_model is not None or self.lora_reference is not None)
        truncated = self.cfg.generation.changes_distribution()
        ref = None
        if kl:  # log softmax(logits / T) at the targets, no truncation; before the policy's forward,
            # so the module runs whole forwards one after the other (FSDP2 gathers, DDP hooks)
            with torch.no_grad(), self._reference() as ref_model:
                ref, _, _ = ref_model(tokens, head=self._head(tokens[:, 1:], sampling=False, start=start))
        logprobs, entropy, whole = self.model(tokens, head=self._head(  # [m, L'-1] each
            tokens[:, 1:], a.entropy_coef > 0, start=start, untruncated=kl and truncated, inputs=tokens))
        if record_ratios:  # the batch's pi/mu as sampled: the first update's only
            self._ratios.append(torch.exp(logprobs.detach().float() - behavior.float())[mask > 0])  # [n]
        adv = advantages[:, None].expand_as(logprobs)                              # [m, L'-1]
        low, high = a.clip_range()
        constant = self.cfg.generation.max_new_tokens if a.length_norm == "constant" else None  # Dr.GRPO
        return aipo_loss(logprobs, behavior, adv, mask, a.rho, a.aggregation, kind=a.name,
                         clip_eps=low, clip_eps_high=high, dual_clip_c=a.dual_clip_c, length_norm_tokens=constant,
                         old_logprobs=old, ref_logprobs=ref,
                         kl_logprobs=whole, kl_coef=a.kl_coef, kl_estimator=a.kl_estimator, mismatch=a.mismatch,
                         mismatch_cap=a.mismatch_cap, entropy=entropy, entropy_coef=a.entropy_coef,
                         staleness=staleness)


def _fusable(params: list[torch.nn.Parameter]) -> bool:
    """Whether AdamW's fused kernel takes these parameters: fp32/16 tensors on CPU or CUDA (a
    DTensor shard included: torchtitan's default). Anything else keeps the per-tensor loop."""
    return bool(params) and all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in params)


@contextlib.contextmanager
def _disabled(model: torch.nn.Module, raw: torch.nn.Module):
    with adapters_disabled(raw):
        yield model


def _mean(values: torch.Tensor) -> float:
    """Mean as a float; 0.0 for no values (a step that trained no rows: dynamic sampling)."""
    return as_float(values.float().mean()) if values.numel() else 0.0
