"""The supervised warm start as a stage of its own: steps on reference solutions (or on the
user's own chats, `warmstart.data`), then an HF-format checkpoint RL can start from.

    llamarl train                                     # warm start → checkpoints/warmstart → RL
    llamarl train model.checkpoint=<run>/checkpoints/warmstart warmstart.steps=0   # RL only
    llamarl train warmstart.data=chats.jsonl warmstart.steps=200   # your chats' assistant turns

Why a stage: RL runs compared from one shared start (sync vs async, the quality bench's
configurations and seeds) differ only in RL. The trainer role runs `warmstart_steps` on its
ranks and saves the checkpoint; `bench/sync_vs_async.py: run_warmstart` does the same in one
process (benchmarks), drawing the same batches, so its checkpoint equals a 1-rank trainer's.
`WarmStart` is one supervised step; `sft_sequences` the task's own (prompt + reference) rows.

With LoRA (model.lora) the warm start trains the adapters only (the base stays frozen) and RL
goes on training the same adapters. The run's KL reference is then the base (the module with
its adapters off, executors/learner.py), not "where RL starts" as without LoRA, where the
reference is refreshed to the warm-started weights; checkpoints/warmstart is written merged.
"""
from __future__ import annotations

import random
from typing import Optional

import torch

from llamarl_core.algorithms.lr_schedule import warmstart_lr_at
from llamarl_core.algorithms.optimizer import policy_optimizer
from llamarl_core.config.schema import DataConfig, GenerationConfig, TrainerSettings, WarmStartConfig
from llamarl_core.data import LoadReport, prompt_format, render_target
from llamarl_core.data.chat_sft import chat_sequences, load_conversations
from llamarl_core.generation.sampling import chunked_policy_logprobs
from llamarl_core.models.lora import trainable_parameters

CHECKPOINT_NAME = "warmstart"  # <run_dir>/checkpoints/warmstart


def max_sequence_tokens(generation: GenerationConfig) -> int:
    """The longest warm-start chat: the longest sequence RL trains on (prompt + completion),
    which the plan already fits to the model's positions."""
    return generation.max_prompt_tokens + generation.max_new_tokens


def warmstart_sequences(w: WarmStartConfig, data: DataConfig, generation: GenerationConfig, prompts,
                        tokenizer) -> tuple[list[tuple[list[int], list[int]]], int]:
    """((tokens, target_mask) to train on, rows skipped): `w.data`'s chats (assistant turns;
    `data.on_error=skip` may skip rows), else the task's prompts + reference solutions."""
    if not w.data:
        return sft_sequences(prompts, tokenizer), 0
    seqs, report = chat_warmstart(w.data, data, generation, tokenizer)
    return seqs, report.num_skipped


def chat_warmstart(path: str, data: DataConfig, generation: GenerationConfig,
                   tokenizer) -> tuple[list[tuple[list[int], list[int]]], LoadReport]:
    """The chats at `path` (warmstart.data) read (`data.on_error` applies) and rendered as the
    run's prompts are; the trainer and the pre-launch check (runtime/data_check.py) both call this."""
    conversations = load_conversations(path, data.on_error)
    source = "arith" if data.name == "arith" else "generic"  # plain: the prompts' own "Q: ...\nA:"
    seqs, wheres = chat_sequences(conversations, prompt_format(data), tokenizer, source)
    limit = max_sequence_tokens(generation)
    over = [i for i, (t, _) in enumerate(seqs) if len(t) > limit]
    if over:  # refused, not cut: a cut chat loses its end-of-turn token and teaches not stopping
        longest = max(over, key=lambda i: len(seqs[i][0]))
        g = generation
        raise ValueError(f"{len(over)} of {len(seqs)} chats are longer than {limit} tokens "
                         f"(generation.max_prompt_tokens={g.max_prompt_tokens} + generation.max_new_tokens="
                         f"{g.max_new_tokens}, RL's longest sequence); the longest has {len(seqs[longest][0])} "
                         f"({wheres[longest]}); raise those or shorten the chats")
    return seqs, conversations.report


def warmstart_steps(model, w: WarmStartConfig, seed: int, seqs, pad_id: int, rank: int = 0, world: int = 1,
                    log=print, on_step=None, adam=None) -> float:
    """`w.steps` supervised steps on `seqs` (`warmstart_sequences`; batches drawn with `seed`,
    run.seed); returns the last loss. `on_step(done, total)` after each step (the trainer's
    heartbeat and live-view progress). `adam`: a LearnerConfig (its `adam_betas`, `adam_eps`:
    trainer.*), None for the defaults.

    Every rank draws the same global batch and trains on its slice, so the warm start (and
    the accuracy RL starts from) is the same however many trainer ranks there are.
    """
    ws = WarmStart(model, w, pad_id, *((adam.adam_betas, adam.adam_eps) if adam else ()))
    rng = random.Random(f"warmstart:{seed}")
    loss = float("nan")
    for i in range(w.steps):
        batch = rng.sample(seqs, min(w.batch_size, len(seqs)))
        # fewer rows than ranks (a small chat file, a small batch): repeated, so no rank's slice is empty
        batch = [batch[k % len(batch)] for k in range(max(len(batch), world))]
        loss = ws.step(batch[rank::world])
        if on_step is not None:
            on_step(i + 1, w.steps)
        if rank == 0 and (i % 20 == 0 or i == w.steps - 1):
            log(f"warmstart step {i + 1}/{w.steps} loss {loss:.4f}")
    return loss


def sft_sequences(prompts, tokenizer) -> list[tuple[list[int], list[int]]]:
    """(tokens, target_mask) per example: prompt + target + EOS, the target and EOS trained."""
    out = []
    for ex, p in zip(prompts.examples, prompts.prompt_ids):
        target = tokenizer.encode(render_target(ex)) + [tokenizer.eos_id]
        out.append((p + target, [0] * len(p) + [1] * len(target)))
    return out


class WarmStart:
    """Supervised steps on (tokens, target_mask) sequences: the mean cross-entropy of the tokens
    whose mask is 1 (a reference solution after its prompt; a chat's assistant turns)."""

    def __init__(self, model: torch.nn.Module, w: WarmStartConfig, pad_id: int,
                 adam_betas: Optional[tuple] = None, adam_eps: float = TrainerSettings.adam_eps):
        self.model, self.pad_id, self.batch_size = model, pad_id, w.batch_size
        self.params = trainable_parameters(model)  # with LoRA: the adapters only
        self.optimizer = policy_optimizer(self.params, w.lr, 0.0, "warmstart", adam_betas, adam_eps)
        self.steps, self.base_lr, self.t = w.steps, w.lr, 0

    def step(self, seqs: list[tuple[list[int], list[int]]]) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = warmstart_lr_at(self.t, self.base_lr, self.steps)
        self.t += 1
        length = max(len(t) for t, _ in seqs)
        tokens = torch.full((len(seqs), length), self.pad_id, dtype=torch.long)   # [B, L]
        loss_mask = torch.zeros(len(seqs), length - 1)                             # [B, L-1]
        for r, (t, m) in enumerate(seqs):
            tokens[r, :len(t)] = torch.tensor(t)
            loss_mask[r, :len(t) - 1] = torch.tensor(m[1:], dtype=loss_mask.dtype)  # position j predicts token j+1
        device = next(self.model.parameters()).device
        tokens, loss_mask = tokens.to(device), loss_mask.to(device)
        logp, _, _ = self.model(tokens, head=lambda h, output: chunked_policy_logprobs(
            h[:, :-1], output, tokens[:, 1:], 1.0))                                # [B, L-1]
        nll = -logp                                                                # [B, L-1]
        loss = (nll * loss_mask).sum() / loss_mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())
