"""Benchmark: the RL trainer step (`executors/train_step.py`) at the default recipe's shapes, CPU.

One real rollout chunk at the recipe's shapes (prompts_per_step x group_size rows, sampled
by the engine from a warm-started model, so completion lengths are what RL trains on) is
trained on by each variant in turn, alternating variants every round so machine noise (the
box is shared) hits all alike; medians are reported. Each variant starts from the same
weights and a fresh optimizer. One torch thread, as the planned trainer rank of cpu_tiny has.

Variants: `padded` (every micro-batch padded to the chunk's longest row, rows in arrival
order: the layout before length sorting), `sorted` (rows in length order, each micro-batch
cut to its own longest row), at micro-batch sizes 64 (default) and the whole chunk, and
`sorted_skip` (the default: rows whose advantage is exactly 0 skip forward and backward, the
gradient is unchanged). Rewards are the task's verifier on the sampled completions, so the
share of groups that all scored alike (zero advantage) is the one RL meets at this accuracy.
`tokens_per_s` counts completion tokens (what the loss trains on); `positions_per_s` counts
every position the model ran, padding and prompt included.

    llamarl bench trainer --out benchmarks/results/trainer_cpu.json
    llamarl bench trainer --checkpoint runs/cpu_tiny/checkpoints/warmstart --out /tmp/t.json
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time

import torch

from llamarl_core.algorithms import compute_advantages
from llamarl_core.bench.provenance import ended, git_commit, machine
from llamarl_core.bench.sync_vs_async import run_warmstart
from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import chunk_config, learner_config
from llamarl_core.executors.setup import encode_prompts, load_split, reward_name
from llamarl_core.executors.train_step import train_on
from llamarl_core.models.build import build_model
from llamarl_core.rewards import get_reward


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="cpu_tiny")
    p.add_argument("--checkpoint", default=None, help="warm-start checkpoint (default: make one)")
    p.add_argument("--rounds", type=int, default=5, help="timed steps per variant")
    p.add_argument("overrides", nargs="*", help="key=value config overrides")
    return p


def make_chunk(cfg, model, tokenizer):
    examples = load_split(cfg.data, "train")
    prompts = encode_prompts(cfg.data, cfg.generation, examples, tokenizer)
    batch = ChunkGenerator(chunk_config(cfg), model, tokenizer, prompts, replica=0, num_replicas=1).generate(0, 0)
    reward_fn = get_reward(reward_name(cfg.data))
    texts = [tokenizer.decode(batch.tokens[r, p:p + c].tolist())
             for r, (p, c) in enumerate(zip(batch.prompt_lens.tolist(), batch.completion_lens.tolist()))]
    batch.rewards = torch.tensor([float(reward_fn(t, examples[i].reference))
                                  for t, i in zip(texts, batch.example_ids.tolist())])
    return batch


def positions(learner: Learner, batch) -> int:
    """Positions the model runs in one step of `learner` (padding and prompts included)."""
    ran, micro_loss = [], learner.micro_loss
    learner.micro_loss = lambda tokens, *a, **k: (ran.append(tokens.numel()), micro_loss(tokens, *a, **k))[1]
    train_on(learner, batch, torch.zeros(batch.num_rows))
    learner.micro_loss = micro_loss
    return sum(ran)


def run(args, command: str) -> int:
    torch.set_num_threads(1)
    at_start = machine(threads=1)
    base = load_config(args.recipe, args.overrides)
    checkpoint = args.checkpoint
    if checkpoint is None:
        checkpoint = os.path.join(tempfile.mkdtemp(prefix="bench-trainer-"), "warmstart")
        print(f"warm start ({base.warmstart.steps} steps) -> {checkpoint}", flush=True)
        run_warmstart(base, checkpoint, log=lambda m: None)
    cfg = load_config(args.recipe, [*args.overrides, f"model.checkpoint={checkpoint}", "warmstart.steps=0"])
    model, tokenizer = build_model(cfg.model, cfg.resources.trainer.dtype, seed=cfg.run.seed)
    batch = make_chunk(cfg, model, tokenizer)
    default_micro = cfg.resources.trainer.micro_batch_size
    variants = {f"{kind}_micro{m}": (kind != "padded", m, kind == "sorted_skip")
                for kind in ("padded", "sorted", "sorted_skip")
                for m in dict.fromkeys((default_micro, batch.num_rows))}
    learners = {}
    for name, (length_sorted, micro, skip) in variants.items():
        vcfg = load_config(args.recipe, [*args.overrides, f"resources.trainer.micro_batch_size={micro}"])
        learners[name] = Learner(copy.deepcopy(model), learner_config(vcfg))
        learners[name].length_sorted, learners[name].skip_zero_advantage = length_sorted, skip
        train_on(learners[name], batch, torch.zeros(batch.num_rows))  # warm-up, not timed
    times: dict = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, learner in learners.items():
            t0 = time.perf_counter()
            train_on(learner, batch, torch.zeros(batch.num_rows))
            times[name].append(time.perf_counter() - t0)
    completion_tokens = int(batch.completion_lens.sum())
    rows = {}
    for name, (length_sorted, micro, skip) in variants.items():
        step_s = statistics.median(times[name])
        ran = positions(learners[name], batch)
        rows[name] = {"length_sorted": length_sorted, "skip_zero_advantage": skip,
                      "micro_batch_size": micro, "step_s": step_s,
                      "step_s_all": times[name], "tokens_per_s": completion_tokens / step_s,
                      "positions": ran, "positions_per_s": ran / step_s}
    baseline = f"padded_micro{default_micro}"
    for r in rows.values():
        r["speedup_vs_padded_default"] = rows[baseline]["step_s"] / r["step_s"]
    result = {"benchmark": "trainer_rl_step", "command": command, "commit": git_commit(),
              "recipe": args.recipe, "overrides": args.overrides, "rows": batch.num_rows,
              "completion_tokens": completion_tokens,
              "prompt_tokens": int(batch.prompt_lens.sum()),
              "longest_row": int((batch.prompt_lens + batch.completion_lens).max()),
              "reward_mean": float(batch.rewards.mean()),
              "zero_advantage_rows_frac": float((compute_advantages(
                  batch.rewards, cfg.algorithm.group_size, cfg.algorithm.advantage) == 0).float().mean()),
              "default_variant": f"sorted_skip_micro{default_micro}", "variants": rows,
              "machine": ended(at_start)}
    print(f"{'variant':<25}{'step_s':>9}{'tokens/s':>10}{'positions':>11}{'vs padded':>11}")
    for name, r in rows.items():
        print(f"{name:<25}{r['step_s']:>9.3f}{r['tokens_per_s']:>10.0f}{r['positions']:>11}"
              f"{r['speedup_vs_padded_default']:>10.2f}x")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    return 0
