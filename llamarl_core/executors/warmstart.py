"""The supervised warm start as a stage of its own: steps on reference solutions (or on the
user's own chats, `warmstart.data`), then an HF-format checkpoint RL can start from.

    llamarl train                                     # warm start → checkpoints/warmstart → RL
    llamarl train model.checkpoint=<run>/checkpoints/warmstart warmstart.steps=0   # RL only
    llamarl train warmstart.data=chats.jsonl warmstart.steps=200   # your chats' assistant turns

Why a stage: RL runs compared from one shared start (sync vs async, the quality bench's
configurations and seeds) differ only in RL. The trainer role runs `warmstart_steps` on its
ranks and saves the checkpoint; `pipeline.run_warmstart` does the same in one process
(benchmarks), drawing the same batches, so its checkpoint equals a 1-rank trainer's.
"""
from __future__ import annotations

import random

from llamarl_core.config.schema import DataConfig, GenerationConfig, WarmStartConfig
from llamarl_core.data import LoadReport, prompt_format
from llamarl_core.data.chat_sft import chat_sequences, load_conversations
from llamarl_core.executors.learner import WarmStart
from llamarl_core.executors.setup import sft_sequences

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
