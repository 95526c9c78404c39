"""Benchmark: streaming vs chunked rollouts on one generator replica (generation.streaming).

Same engine, same weights, same prompts, one process: `chunked` generates steps 0..S-1 one
chunk at a time (ChunkGenerator.generate: a chunk runs until its longest row ends, the slots
its tail frees stay idle); `streaming` runs the same S chunks through one engine run
(executors/stream.ChunkStream: a freed slot takes the next step's prompt at the next decode
step). The long tail is the generation bench's: tiny-2m at T = 1 with stop tokens planted
by a fixed seed, geometric lengths capped at --new-tokens (max/mean ~3). Repeats alternate
which mode goes first (the machine is shared); medians are reported.

Two numbers per mode: generator tokens/s on this CPU (`streaming_vs_chunked`, the issue's
key), and tokens per decode step (`tokens_per_decode_step_ratio`): on a GPU a decode step
costs about the same whatever its live rows, so that ratio is what streaming buys there; on a
CPU a step's cost shrinks with its live rows (finished rows are compacted out), which is why
the tokens/s ratio here is smaller.

    nice -n 19 python scripts/bench_streaming.py --out benchmarks/results/streaming_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.pipeline import chunk_config
from llamarl_core.executors.setup import PromptSet
from llamarl_core.executors.stream import ChunkStream
from llamarl_core.generation import SamplingParams
from llamarl_core.generation import scheduler
from llamarl_core.models import ByteTokenizer, Llama, get_preset


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default="tiny-2m")
    p.add_argument("--steps", type=int, default=8, help="chunks (trainer steps) per run")
    p.add_argument("--prompts-per-step", type=int, default=16)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64, help="slots (resources.generator.max_batch_size)")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=96, help="the length cap")
    p.add_argument("--stops", type=int, default=8, help="planted stop tokens (of 260)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def count_decode_steps() -> list[int]:
    steps = []
    original = scheduler.decode

    def counted(*args, **kwargs):
        steps.append(1)
        return original(*args, **kwargs)
    scheduler.decode = counted
    return steps


def load() -> dict:
    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        uptime = None
    return {"uptime": uptime, "load_average": os.getloadavg(), "nice": os.nice(0)}


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model_args = get_preset(args.preset)
    model, tok = Llama(model_args).eval().requires_grad_(False), ByteTokenizer()
    gen = torch.Generator().manual_seed(0)
    n_prompts = args.steps * args.prompts_per_step
    prompts = torch.randint(0, 256, (n_prompts, args.prompt_len), generator=gen).tolist()
    stops = sorted(torch.randperm(256, generator=gen)[:args.stops].tolist())
    cfg = load_config("cpu_tiny", [f"algorithm.prompts_per_step={args.prompts_per_step}",
                                   f"algorithm.group_size={args.group_size}",
                                   f"generation.max_new_tokens={args.new_tokens}",
                                   f"generation.max_prompt_tokens={args.prompt_len + 1}",
                                   f"resources.generator.max_batch_size={args.batch_size}"])
    chunks = ChunkGenerator(chunk_config(cfg), model, tok, PromptSet([None] * n_prompts, prompts), 0, 1)
    chunks.params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0,
                                   stop_token_ids=tuple(stops), ignore_eos=True)
    stream = ChunkStream(chunks)
    decode_steps = count_decode_steps()

    def chunked() -> None:
        for n in range(args.steps):
            chunks.generate(n, 0)

    def streaming() -> None:
        stream.run(0, may_start=lambda n: n < args.steps, held=lambda: 0)

    modes = {"chunked": chunked, "streaming": streaming}
    chunks.generate(0, 0)  # warm-up
    runs = {m: [] for m in modes}
    lengths: list[int] = []
    for repeat in range(args.repeats):
        for mode in (list(modes) if repeat % 2 == 0 else list(modes)[::-1]):
            tokens0, steps0 = chunks.tokens_generated, len(decode_steps)
            t0 = time.perf_counter()
            modes[mode]()
            seconds = time.perf_counter() - t0
            tokens = chunks.tokens_generated - tokens0
            runs[mode].append({"seconds": seconds, "tokens": tokens, "decode_steps": len(decode_steps) - steps0})
    # lengths of one chunked pass, for max/mean
    done = []
    orig = chunks.engine.stream

    def spy(*a, on_finish, **k):
        return orig(*a, on_finish=lambda d: (done.append(int(d.token_ids.numel())), on_finish(d)), **k)
    chunks.engine.stream = spy
    chunked()
    chunks.engine.stream = orig
    mean = sum(done) / len(done)
    med = {m: {"tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in rs),
               "tokens_per_decode_step": statistics.median(r["tokens"] / r["decode_steps"] for r in rs)}
           for m, rs in runs.items()}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    report = {
        "command": " ".join([sys.executable] + sys.argv), "commit": commit,
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": args.threads,
                    "load_at_start": None},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "stop_token_ids": stops, "mean_new_tokens": mean, "max_to_mean_new_tokens": max(done) / mean,
        "runs": runs, "medians": med,
        "streaming_vs_chunked": med["streaming"]["tokens_per_s"] / med["chunked"]["tokens_per_s"],
        "tokens_per_decode_step_ratio": (med["streaming"]["tokens_per_decode_step"]
                                         / med["chunked"]["tokens_per_decode_step"]),
        "target": 1.5,
        "load_at_end": load(),
    }
    report["machine"]["load_at_start"] = LOAD_AT_START
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"long tail max/mean {report['max_to_mean_new_tokens']:.2f}: streaming "
          f"{med['streaming']['tokens_per_s']:.0f} tok/s vs chunked {med['chunked']['tokens_per_s']:.0f} "
          f"tok/s = {report['streaming_vs_chunked']:.2f}x; tokens per decode step "
          f"{report['tokens_per_decode_step_ratio']:.2f}x")
    return 0


LOAD_AT_START = load()

if __name__ == "__main__":
    sys.exit(main())
