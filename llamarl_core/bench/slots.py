"""Benchmark: the streaming generator's tokens/s by slot count (resources.generator.max_batch_size).

What it answers: at k = 1 a chunk's rows all start when the version that opens it lands, so its
groups end together near the chunk's end, and a trainer step shorter than that chunk waits for
them (docs/KNOWN_GAPS.md). Fewer slots would spread the group ends over the chunk; this measures
what that costs the generator, on the default recipe's model and prompts.

Each case streams the same `--chunks` chunks (the recipe's prompts_per_step x group_size rows
each) through `ChunkStream` with the given slots, one engine, one thread, from a checkpoint
(a run's `checkpoints/warmstart`, so completion lengths are the RL run's). Cases alternate
within each repeat; medians are reported, with each case's tokens/s against the recipe's own
slot count.

    llamarl bench slots /tmp/run/checkpoints/warmstart --out benchmarks/results/generation_slots_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from llamarl_core.bench.generation import alternating
from llamarl_core.bench.provenance import ended, git_commit, machine
from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.pipeline import chunk_config
from llamarl_core.executors.setup import encode_prompts, load_split
from llamarl_core.executors.stream import ChunkStream
from llamarl_core.models.checkpoint import load_pretrained


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a checkpoint directory (e.g. a run's checkpoints/warmstart)")
    p.add_argument("--recipe", default="cpu_tiny")
    p.add_argument("--slots", default="256,128,64", help="comma-separated; the first is the baseline")
    p.add_argument("--chunks", type=int, default=6, help="chunks streamed per case")
    p.add_argument("--repeats", type=int, default=3)
    return p


def make_case(args, slots: int) -> tuple[ChunkStream, ChunkGenerator]:
    cfg = load_config(args.recipe, [f"resources.generator.max_batch_size={slots}"])
    model, tok = load_pretrained(args.checkpoint)
    model.eval().requires_grad_(False)
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tok)
    chunks = ChunkGenerator(chunk_config(cfg), model, tok, prompts, 0, 1)
    stream = ChunkStream(chunks)
    stream.run(0, may_start=lambda n: n < 1, held=lambda: 0)  # warm-up: one chunk
    return stream, chunks


def run_once(stream: ChunkStream, chunks: ChunkGenerator, first: int, n: int) -> dict:
    tokens0, t0 = chunks.tokens_generated, time.perf_counter()
    stream.run(first, may_start=lambda c: c < first + n, held=lambda: 0)
    seconds = time.perf_counter() - t0
    tokens = chunks.tokens_generated - tokens0
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "chunk_s": seconds / n}


def run(args, command: str) -> int:
    at_start = machine(threads=1)
    torch.set_num_threads(1)
    slots = [int(x) for x in args.slots.split(",")]
    cases = {s: make_case(args, s) for s in slots}
    runs: dict = {s: [] for s in slots}
    for r, s in alternating(slots, args.repeats):  # every case streams the same chunks in a repeat
        runs[s].append(run_once(*cases[s], first=1 + r * args.chunks, n=args.chunks))
    med = {s: {"tokens_per_s": statistics.median(x["tokens_per_s"] for x in rs),
               "chunk_s": statistics.median(x["chunk_s"] for x in rs)} for s, rs in runs.items()}
    base = slots[0]
    result = {"command": command,
              "commit": git_commit(), "recipe": args.recipe, "checkpoint": args.checkpoint,
              "chunks_per_case": args.chunks, "repeats": args.repeats, "threads": 1,
              "runs": {str(s): rs for s, rs in runs.items()},
              "medians": {str(s): m for s, m in med.items()},
              "tokens_per_s_vs_baseline": {str(s): med[s]["tokens_per_s"] / med[base]["tokens_per_s"] for s in slots},
              # the same ratio within each repeat (its cases ran back to back): how far the machine moved
              "tokens_per_s_vs_baseline_per_repeat": {
                  str(s): [x["tokens_per_s"] / b["tokens_per_s"] for x, b in zip(runs[s], runs[base])] for s in slots},
              "baseline_slots": base,
              "machine": ended(at_start)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"{'slots':>6} {'tokens/s':>10} {'s/chunk':>8} {'vs ' + str(base):>8}")
    for s in slots:
        print(f"{s:>6} {med[s]['tokens_per_s']:>10.0f} {med[s]['chunk_s']:>8.3f} "
              f"{result['tokens_per_s_vs_baseline'][str(s)]:>8.2f}")
    return 0
