"""Benchmark: the RL trainer step (`Learner.rl_step`) at the default recipe's shapes, CPU.

One real rollout chunk at the recipe's shapes (prompts_per_step x group_size rows, sampled
by the engine from a warm-started model, so completion lengths are what RL trains on) is
trained on by each variant in turn, alternating variants every round so machine noise (the
box is shared) hits all alike; medians are reported. Each variant starts from the same
weights and a fresh optimizer. One torch thread, as the planned trainer rank of cpu_tiny has.

Variants: `padded` (every micro-batch padded to the chunk's longest row, rows in arrival
order: the layout before length sorting), `sorted` (rows in length order, each micro-batch
cut to its own longest row), at micro-batch sizes 64 (default) and the whole chunk.
`tokens_per_s` counts completion tokens (what the loss trains on); `positions_per_s` counts
every position the model ran, padding and prompt included.

    python scripts/bench_trainer.py --out benchmarks/results/trainer_cpu.json
    python scripts/bench_trainer.py --checkpoint runs/cpu_tiny/checkpoints/warmstart --out /tmp/t.json
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.setup import build_model, encode_prompts, load_split
from llamarl_core.executors.warmstart import run_warmstart


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--recipe", default="cpu_tiny")
    p.add_argument("--checkpoint", default=None, help="warm-start checkpoint (default: make one)")
    p.add_argument("--rounds", type=int, default=5, help="timed steps per variant")
    p.add_argument("overrides", nargs="*", help="key=value config overrides")
    return p.parse_args(argv)


def make_chunk(cfg, model, tokenizer):
    prompts = encode_prompts(cfg, load_split(cfg, "train"), tokenizer)
    batch = ChunkGenerator(cfg, model, tokenizer, prompts, replica=0, num_replicas=1).generate(0, 0)
    batch.rewards = (torch.rand(batch.num_rows, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    return batch


def positions(batch, micro: int, length_sorted: bool) -> int:
    lengths = batch.prompt_lens + batch.completion_lens
    order = torch.argsort(lengths, stable=True) if length_sorted else torch.arange(len(lengths))
    width = int(lengths.max())
    return sum(len(order[s:s + micro]) * (int(lengths[order[s:s + micro]].max()) if length_sorted else width)
               for s in range(0, len(lengths), micro))


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    base = load_config(args.recipe, args.overrides)
    checkpoint = args.checkpoint
    if checkpoint is None:
        checkpoint = os.path.join(tempfile.mkdtemp(prefix="bench-trainer-"), "warmstart")
        print(f"warm start ({base.warmstart.steps} steps) -> {checkpoint}", flush=True)
        run_warmstart(base, checkpoint, log=lambda m: None)
    cfg = load_config(args.recipe, [*args.overrides, f"model.checkpoint={checkpoint}", "warmstart.steps=0"])
    model, tokenizer = build_model(cfg, cfg.resources.trainer.dtype)
    batch = make_chunk(cfg, model, tokenizer)
    default_micro = cfg.resources.trainer.micro_batch_size
    variants = {f"{kind}_micro{m}": (kind == "sorted", m) for kind in ("padded", "sorted")
                for m in dict.fromkeys((default_micro, batch.num_rows))}
    learners = {}
    for name, (length_sorted, micro) in variants.items():
        vcfg = load_config(args.recipe, [*args.overrides, f"resources.trainer.micro_batch_size={micro}"])
        learners[name] = Learner(copy.deepcopy(model), vcfg)
        learners[name].length_sorted = length_sorted
        learners[name].rl_step(batch, torch.zeros(batch.num_rows))  # warm-up, not timed
    times: dict = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, learner in learners.items():
            t0 = time.perf_counter()
            learner.rl_step(batch, torch.zeros(batch.num_rows))
            times[name].append(time.perf_counter() - t0)
    completion_tokens = int(batch.completion_lens.sum())
    rows = {}
    for name, (length_sorted, micro) in variants.items():
        step_s = statistics.median(times[name])
        ran = positions(batch, micro, length_sorted)
        rows[name] = {"length_sorted": length_sorted, "micro_batch_size": micro, "step_s": step_s,
                      "step_s_all": times[name], "tokens_per_s": completion_tokens / step_s,
                      "positions": ran, "positions_per_s": ran / step_s}
    baseline = f"padded_micro{default_micro}"
    for r in rows.values():
        r["speedup_vs_padded_default"] = rows[baseline]["step_s"] / r["step_s"]
    result = {"benchmark": "trainer_rl_step", "command": " ".join(["python", *sys.argv]),
              "recipe": args.recipe, "overrides": args.overrides, "rows": batch.num_rows,
              "completion_tokens": completion_tokens,
              "prompt_tokens": int(batch.prompt_lens.sum()),
              "longest_row": int((batch.prompt_lens + batch.completion_lens).max()),
              "default_variant": f"sorted_micro{default_micro}", "variants": rows,
              "machine": {"cpu_count": os.cpu_count(), "torch": torch.__version__, "threads": 1,
                          "python": platform.python_version(), "loadavg": os.getloadavg()}}
    print(f"{'variant':<20}{'step_s':>9}{'tokens/s':>10}{'positions':>11}{'vs padded':>11}")
    for name, r in rows.items():
        print(f"{name:<20}{r['step_s']:>9.3f}{r['tokens_per_s']:>10.0f}{r['positions']:>11}"
              f"{r['speedup_vs_padded_default']:>10.2f}x")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
