"""Benchmark: streaming vs chunked rollouts on one generator replica (executors/stream.py;
the chunked mode lives only here, as the baseline).

Same engine, same weights, same prompts, one process: `chunked` generates steps 0..S-1 one
chunk at a time (ChunkGenerator.generate: a chunk runs until its longest row ends, the slots
its tail frees stay idle); `streaming` runs the same S chunks through one engine run
(executors/stream.ChunkStream: a freed slot takes the next step's prompt at the next decode
step). The long tail is the generation bench's: T = 1 with stop tokens planted by a fixed
seed, geometric lengths capped at --new-tokens (max/mean ~3). Repeats alternate which mode
goes first (the machine is shared); medians are reported.

Which model: streaming buys decode steps: it runs the same tokens in ~2.4x fewer, fuller
steps (`tokens_per_decode_step_ratio`). That is worth tokens/s where a decode step costs about
the same whatever its live rows, i.e. where reading the weights dominates the step: a GPU, and
any real model. The headline `streaming_vs_chunked` is therefore the first of --presets,
tiny-20m (20M params), and tiny-2m (2.5M, the old headline, its 10 MB of weights in cache) is
a second case for comparison. Each case records, per mode, tokens/s (wall and per CPU-second
of this 1-thread process, which the shared machine's load moves less), decode steps, tokens
and rows per step, prefill calls and their share of the time, tokens per decode-second
(`decode_only_ratio`: the decode steps alone), and the measured decode-step cost by rows in
the step (`decode_ms_by_rows`, `step_cost_fewest_vs_most_rows`: a step of 1-8 rows against
one of 49-64, 1.0 on a GPU), so a reader sees why the ratios differ. A streaming slot that
frees is refilled at once, so streaming makes one small prefill per admission (chunked: one
per chunk); where a forward's cost is its weight reads, each costs about a decode step.
Nothing else differs between the cases: same engine, prompts, stop tokens, settings.
`streaming_vs_chunked` is the ratio of the two modes' median tokens/s;
`streaming_vs_chunked_per_repeat` gives the ratio within each repeat, whose two runs were back
to back, so a reader sees how far the shared machine moved it.

A refill's prefill joins the decode step it is admitted at (forward.step: the admitted
prompts' rows and the running rows share every projection GEMM, one pass over the weights).
The third mode, `streaming_unfused`, runs each refill's prefill as a forward of its own first
(GenerationEngine(fuse_prefill=False), the engine before that change): the JSON gives both
ratios, `streaming_fused_vs_unfused` and `streaming_unfused_vs_chunked`, from the same run.

    nice -n 19 llamarl bench streaming --out benchmarks/results/streaming_cpu.json
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
from llamarl_core.executors.setup import PromptSet
from llamarl_core.executors.stream import ChunkStream
from llamarl_core.generation import SamplingParams
from llamarl_core.generation import prefill_once, scheduler
from llamarl_core.models import ByteTokenizer, Llama, get_preset

ROW_BINS = ((1, 8), (9, 16), (17, 32), (33, 48), (49, 64))


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="tiny-20m,tiny-2m",
                   help="comma-separated; the first gives the headline streaming_vs_chunked")
    p.add_argument("--steps", type=int, default=8, help="chunks (trainer steps) per run")
    p.add_argument("--prompts-per-step", type=int, default=16)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64, help="slots (resources.generator.max_batch_size)")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=96, help="the length cap")
    p.add_argument("--stops", type=int, default=8, help="planted stop tokens (of 260)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    return p


class DecodeTimer:
    """Wraps the engine's decode step and prefill: (rows, seconds) of every call of each."""

    def __init__(self):
        self.calls: list[tuple[int, float]] = []     # decode steps: (decode rows, seconds)
        self.prefills: list[tuple[int, float]] = []  # prefills run on their own
        self.joined: list[int] = []                  # prefill rows of each decode step a prefill joined
        scheduler.decode = self._timed(scheduler.decode, self.calls)
        prefill_once.prefill = self._timed(prefill_once.prefill, self.prefills)
        original = scheduler.step

        def step(model, proj, cache, decode_rows=None, prefill_rows=None):  # both kinds in one forward
            t0 = time.perf_counter()
            out = original(model, proj, cache, decode_rows=decode_rows, prefill_rows=prefill_rows)
            self.calls.append((int(decode_rows[0].shape[0]), time.perf_counter() - t0))
            self.joined.append(int(prefill_rows[0].shape[0]))
            return out
        scheduler.step = step

    @staticmethod
    def _timed(original, into: list):
        def timed(model, proj, cache, tokens, *args, **kwargs):
            t0 = time.perf_counter()
            out = original(model, proj, cache, tokens, *args, **kwargs)
            into.append((int(tokens.shape[0]), time.perf_counter() - t0))
            return out
        return timed


def by_rows(calls: list[tuple[int, float]]) -> dict:
    out = {}
    for lo, hi in ROW_BINS:
        ms = [1e3 * s for b, s in calls if lo <= b <= hi]
        if ms:
            out[f"{lo}-{hi}"] = {"steps": len(ms), "median_ms": statistics.median(ms)}
    return out


def run_case(preset: str, args, timer: DecodeTimer) -> dict:
    torch.manual_seed(0)
    model, tok = Llama(get_preset(preset)).eval().requires_grad_(False), ByteTokenizer()
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

    def chunked() -> None:
        for n in range(args.steps):
            chunks.generate(n, 0)

    def streaming() -> None:
        stream.run(0, may_start=lambda n: n < args.steps, held=lambda: 0)

    def streaming_unfused() -> None:  # each refill's prefill a forward of its own (the old engine)
        chunks.engine.fuse_prefill = False
        try:
            streaming()
        finally:
            chunks.engine.fuse_prefill = True

    modes = {"chunked": chunked, "streaming": streaming, "streaming_unfused": streaming_unfused}
    chunks.generate(0, 0)  # warm-up
    runs: dict = {m: [] for m in modes}
    calls: dict = {m: [] for m in modes}
    for _, mode in alternating(modes, args.repeats):
        tokens0, n0, p0 = chunks.tokens_generated, len(timer.calls), len(timer.prefills)
        j0 = len(timer.joined)
        t0, c0 = time.perf_counter(), time.process_time()
        modes[mode]()
        seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        mine = timer.calls[n0:]
        calls[mode] += mine
        runs[mode].append({"seconds": seconds, "cpu_s": cpu_s, "tokens": chunks.tokens_generated - tokens0,
                           "decode_steps": len(mine), "decode_s": sum(s for _, s in mine),
                           "prefill_calls": len(timer.prefills) - p0,
                           "prefill_s": sum(s for _, s in timer.prefills[p0:]),
                           "prefills_joined_to_decode": len(timer.joined) - j0,
                           "rows_per_decode_step": sum(b for b, _ in mine) / len(mine)})
    done: list[int] = []  # lengths of one chunked pass, for max/mean
    orig = chunks.engine.stream

    def spy(*a, on_finish, **k):
        return orig(*a, on_finish=lambda d: (done.append(int(d.token_ids.numel())), on_finish(d)), **k)
    chunks.engine.stream = spy
    chunked()
    chunks.engine.stream = orig
    mean = sum(done) / len(done)
    med = {m: {"tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in rs),
               "tokens_per_decode_s": statistics.median(r["tokens"] / r["decode_s"] for r in rs),
               "tokens_per_cpu_s": statistics.median(r["tokens"] / r["cpu_s"] for r in rs),
               "decode_steps": statistics.median(r["decode_steps"] for r in rs),
               "tokens_per_decode_step": statistics.median(r["tokens"] / r["decode_steps"] for r in rs),
               "rows_per_decode_step": statistics.median(r["rows_per_decode_step"] for r in rs),
               "decode_share_of_time": statistics.median(r["decode_s"] / r["seconds"] for r in rs),
               "prefill_calls": statistics.median(r["prefill_calls"] for r in rs),
               "prefill_s": statistics.median(r["prefill_s"] for r in rs),
               "prefill_share_of_time": statistics.median(r["prefill_s"] / r["seconds"] for r in rs),
               "prefills_joined_to_decode": statistics.median(r["prefills_joined_to_decode"] for r in rs),
               "decode_ms_by_rows": by_rows(calls[m])}
           for m, rs in runs.items()}
    cost = by_rows(calls["chunked"] + calls["streaming_unfused"])  # plain decode steps only
    lo, hi = next(iter(cost)), list(cost)[-1]
    return {"preset": preset, "params": sum(p.numel() for p in model.parameters()),
            "stop_token_ids": stops, "mean_new_tokens": mean, "max_to_mean_new_tokens": max(done) / mean,
            "runs": runs, "medians": med,
            "decode_ms_by_rows": cost,
            # what a step of few live rows costs against a full one: near 0 → tail steps are free
            "step_cost_fewest_vs_most_rows": cost[lo]["median_ms"] / cost[hi]["median_ms"],
            "streaming_vs_chunked": med["streaming"]["tokens_per_s"] / med["chunked"]["tokens_per_s"],
            # the same ratio within each repeat (the two modes ran back to back): its spread is
            # how much the shared machine moved while the bench ran
            "streaming_vs_chunked_per_repeat": paired(runs),
            # the same per CPU-second of this 1-thread process: less at the mercy of what else runs
            "streaming_vs_chunked_cpu_time": (med["streaming"]["tokens_per_cpu_s"]
                                              / med["chunked"]["tokens_per_cpu_s"]),
            "tokens_per_decode_step_ratio": (med["streaming"]["tokens_per_decode_step"]
                                             / med["chunked"]["tokens_per_decode_step"]),
            "decode_only_ratio": (med["streaming_unfused"]["tokens_per_decode_s"]
                                  / med["chunked"]["tokens_per_decode_s"]),
            # what joining each refill's prefill to the decode step buys, same run
            "streaming_fused_vs_unfused": (med["streaming"]["tokens_per_s"]
                                           / med["streaming_unfused"]["tokens_per_s"]),
            "streaming_unfused_vs_chunked": (med["streaming_unfused"]["tokens_per_s"]
                                             / med["chunked"]["tokens_per_s"])}


def paired(runs: dict) -> dict:
    """streaming / chunked tokens/s of each repeat: min, median, max and the list."""
    r = [(s["tokens"] / s["seconds"]) / (c["tokens"] / c["seconds"])
         for s, c in zip(runs["streaming"], runs["chunked"])]
    return {"min": min(r), "median": statistics.median(r), "max": max(r), "each": r}


def note(cases: list[dict]) -> str:
    """What the numbers say, from the numbers (the first case is the headline)."""
    parts = []
    for c in cases:
        st, ch = c["medians"]["streaming"], c["medians"]["chunked"]
        each = c["streaming_vs_chunked_per_repeat"]
        parts.append(f"{c['preset']}: {c['streaming_vs_chunked']:.2f}x tokens/s "
                     f"(within one repeat {each['min']:.2f}x .. {each['max']:.2f}x, median {each['median']:.2f}x) "
                     f"({c['streaming_vs_chunked_cpu_time']:.2f}x per CPU-second), "
                     f"{c['tokens_per_decode_step_ratio']:.2f}x tokens per decode step, decode steps alone "
                     f"{c['decode_only_ratio']:.2f}x; a 1-8-row step costs {c['step_cost_fewest_vs_most_rows']:.2f} "
                     f"of a 49-64-row one; streaming made {st['prefill_calls']:.0f} prefills "
                     f"({100 * st['prefill_share_of_time']:.0f}% of its time) and joined "
                     f"{st['prefills_joined_to_decode']:.0f} to decode steps, against chunked's "
                     f"{ch['prefill_calls']:.0f} ({100 * ch['prefill_share_of_time']:.0f}%); joining them "
                     f"is worth {c['streaming_fused_vs_unfused']:.2f}x (streaming with each refill "
                     f"prefilled on its own: {c['streaming_unfused_vs_chunked']:.2f}x chunked)")
    return (f"headline streaming_vs_chunked: the {cases[0]['preset']} case (a decode step that is mostly "
            "its weight reads, as on a GPU and for any real model); per case: " + "; ".join(parts) + ".")


def run(args, command: str) -> int:
    at_start = machine(threads=args.threads, nice=os.nice(0))
    torch.set_num_threads(args.threads)
    presets = [p for p in args.presets.split(",") if p]
    timer = DecodeTimer()
    cases = []
    for preset in presets:
        cases.append(run_case(preset, args, timer))
        c = cases[-1]
        print(f"{preset}: long tail max/mean {c['max_to_mean_new_tokens']:.2f}: streaming "
              f"{c['medians']['streaming']['tokens_per_s']:.0f} tok/s vs chunked "
              f"{c['medians']['chunked']['tokens_per_s']:.0f} tok/s = {c['streaming_vs_chunked']:.2f}x; "
              f"tokens per decode step {c['tokens_per_decode_step_ratio']:.2f}x; decode ms by rows "
              + ", ".join(f"{k}: {v['median_ms']:.1f}" for k, v in c["decode_ms_by_rows"].items()), flush=True)
    head = cases[0]
    report = {
        "command": command, "commit": git_commit(),
        "note": note(cases),
        "machine": ended(at_start),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "headline_preset": head["preset"],
        "streaming_vs_chunked": head["streaming_vs_chunked"],
        "streaming_vs_chunked_per_repeat": head["streaming_vs_chunked_per_repeat"],
        "streaming_vs_chunked_cpu_time": head["streaming_vs_chunked_cpu_time"],
        "tokens_per_decode_step_ratio": head["tokens_per_decode_step_ratio"],
        "target": 1.5,
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    return 0
