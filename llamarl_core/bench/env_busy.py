"""Benchmark: how busy the generator stays while episodes wait on a slow tool.

While an episode waits on its environment the engine decodes the other episodes (continuous
batching, envs/runner.py); the generator idles only when no row decodes and nothing is ready,
and then the runner's refill blocks on the environment pool, counting the seconds
(`EpisodeRunner.waited_s`). Busy share = 1 - waited / wall time of the chunk: the share of
`ChunkGenerator.generate` spent in prefill/decode steps (and the runner's own bookkeeping).

Two variants on the same engine, model and rows (`--rows` episodes over `--slots` slots; one
chunk per run, the same chunk for both within a repeat), alternating over `--repeats`:

    tool_free   each of the first `--tool-turns` steps answers with a tool message at once
    slow_tool   the same, each such step sleeping `--sleep-s` first (a slow tool)

The environment is a class this bench writes into its work dir (`busy_env.py`) and loads by
path like a user's (`env.entry`), so it runs in the real environment workers. It treats each
of the first K assistant turns as a tool call, whatever the model wrote (a random tiny model
cannot write a real one), and ends the episode after turn K + 1. Turns end on a stop token:
on the random tiny preset, stop tokens planted by a fixed seed (`--stops` of the 256 bytes, so
a turn's length is geometric, mean ~256 / stops, capped at `--turn-tokens`); with
`--checkpoint`, the model's own end-of-turn (eos) tokens.

The goal (issue #47): busy(slow_tool) >= 0.9 x busy(tool_free). A chunk's last episodes all wait
on their tools with nothing left to decode, so the tail of a chunk is idle by construction:
the fewer episodes in flight against slots x (1 + tool latency / slot time of a turn) (Little's
law, `in_flight_needed`), the lower the slow variant's share. Busy share counts every engine
step however few rows it decodes; `rows_per_step` (model tokens / engine steps) and the tokens/s
ratio show what fewer ready episodes cost while the engine is busy.

    llamarl bench env-busy --out benchmarks/results/env_busy_cpu.json
"""
from __future__ import annotations

import argparse
import dataclasses
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
from llamarl_core.models import ByteTokenizer, Llama, get_preset

GOAL = 0.9  # busy(slow_tool) / busy(tool_free), issue #47
VARIANTS = {"tool_free": "FastEnv", "slow_tool": "SlowEnv"}

ENV_SOURCE = '''"""Written by `llamarl bench env-busy` (llamarl_core/bench/env_busy.py): each of the first
{turns} assistant turns is taken as a tool call and answered with a tool message (after
sleeping `sleep_s`); the episode ends after turn {turns} + 1."""
import time

TOOL_TURNS = {turns}


class FastEnv:
    sleep_s = 0.0

    def reset(self, example):
        self.turns = 0
        return example["messages"]

    def step(self, assistant_text):
        self.turns += 1
        if self.turns > TOOL_TURNS:
            return [], None, True
        time.sleep(self.sleep_s)
        return ([{{"role": "tool", "content": f"result {{self.turns}}: 42"}}], None, False,
                {{"tool_calls": 1, "tool_errors": 0}})


class SlowEnv(FastEnv):
    sleep_s = {sleep_s!r}
'''


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny-2m", help="a random-weight preset (byte tokenizer)")
    p.add_argument("--checkpoint", default=None, help="a HF checkpoint dir instead (e.g. models/smollm2-135m)")
    p.add_argument("--rows", type=int, default=64, help="episodes per chunk (a multiple of --group-size)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--slots", type=int, default=16, help="rows the engine decodes together")
    p.add_argument("--tool-turns", type=int, default=3, help="tool calls per episode (then one final turn)")
    p.add_argument("--sleep-s", type=float, default=0.5, help="the slow tool's seconds per call")
    p.add_argument("--turn-tokens", type=int, default=48, help="a turn's token cap")
    p.add_argument("--stops", type=int, default=16, help="planted stop tokens (tiny preset only)")
    p.add_argument("--workers", type=int, default=2, help="environment worker processes")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--repeats", type=int, default=3)
    return p


def write_env(work_dir: str, tool_turns: int, sleep_s: float) -> str:
    path = os.path.join(work_dir, "busy_env.py")
    with open(path, "w") as f:
        f.write(ENV_SOURCE.format(turns=tool_turns, sleep_s=sleep_s))
    return path


def overrides(args, entry: str) -> list[str]:
    turn_room = args.turn_tokens + 32  # a turn and the tool message after it (~25 tokens)
    return [f"algorithm.group_size={args.group_size}", f"algorithm.prompts_per_step={args.rows // args.group_size}",
            f"resources.generator.max_batch_size={args.slots}", "data.num_train_examples=512",
            f"generation.max_new_tokens={args.turn_tokens}", "generation.max_prompt_tokens=64",
            "generation.temperature=1.0", f"env.entry={entry}", f"env.max_turns={args.tool_turns + 1}",
            f"env.max_episode_tokens={turn_room * (args.tool_turns + 1)}", f"env.workers={args.workers}"]


def build_model(args):
    """(model, tokenizer, planted stop ids): the checkpoint, or the preset with seed-0 weights."""
    if args.checkpoint:
        from llamarl_core.models.checkpoint import load_pretrained
        model, tok = load_pretrained(args.checkpoint)
        return model.eval().requires_grad_(False), tok, []
    torch.manual_seed(0)
    model = Llama(get_preset(args.preset)).eval().requires_grad_(False)
    gen = torch.Generator().manual_seed(0)
    return model, ByteTokenizer(), sorted(torch.randperm(256, generator=gen)[:args.stops].tolist())


def make_generator(args, model, tok, stops: list[int], entry: str) -> ChunkGenerator:
    cfg = load_config("cpu_tiny", overrides(args, entry))
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tok)
    chunks = ChunkGenerator(chunk_config(cfg), model, tok, prompts, 0, 1)
    if stops:
        chunks.params = dataclasses.replace(chunks.params, stop_token_ids=tuple(stops))
    return chunks


def measure(chunks: ChunkGenerator, chunk: int) -> dict:
    """One chunk of episodes: wall seconds, seconds the runner waited with nothing to decode,
    the time-weighted mean of episodes in flight (started, not yet finished), and counts."""
    runners, events, steps = [], [], [0]  # events: (time, +rows started / -1 finished)
    open_runner = chunks.episode_runner

    def watched(row_example):
        runner = open_runner(row_example)
        hooks = runner.hooks

        def timed_hooks(refill, on_finish):
            def started(free):
                rows = refill(free)
                events.append((time.perf_counter(), len(rows)))
                return rows

            def finished(done):
                events.append((time.perf_counter(), -1))
                on_finish(done)
            return hooks(started, finished)
        runner.hooks = timed_hooks
        runners.append(runner)
        return runner
    chunks.episode_runner = watched
    try:
        t0 = time.perf_counter()
        rollout = chunks.generate(chunk, policy_version=0,  # between_steps: once per engine step
                                  between_steps=lambda: steps.__setitem__(0, steps[0] + 1))
        seconds = time.perf_counter() - t0
    finally:
        del chunks.episode_runner  # the method again
    waited = runners[0].waited_s
    area, live, last = 0.0, 0, t0
    for t, change in events:
        area, live, last = area + live * (t - last), live + change, t
    model_tokens = int(rollout.loss_mask.sum().item())
    return {"seconds": seconds, "waited_s": waited, "busy_share": max(0.0, 1.0 - waited / seconds),
            "episodes": rollout.num_rows, "episodes_per_s": rollout.num_rows / seconds,
            "model_tokens": model_tokens, "tokens_per_s": model_tokens / seconds,
            "env_tokens": int(rollout.completion_lens.sum().item()) - model_tokens,
            "mean_in_flight": area / seconds, "engine_steps": steps[0],
            "rows_per_step": model_tokens / max(1, steps[0]),  # a step samples one token per decoding row
            "turns_mean": rollout.turns.float().mean().item(),
            "tool_calls": int(rollout.tool_calls.sum().item()), "truncated": int(rollout.truncated.sum().item()),
            "env_ms_mean": rollout.env_ms.float().mean().item()}


def summarize(runs: dict, args) -> dict:
    keys = ("seconds", "waited_s", "busy_share", "episodes_per_s", "tokens_per_s", "mean_in_flight", "turns_mean",
            "rows_per_step")
    med = {v: {k: statistics.median(r[k] for r in rs) for k in keys} for v, rs in runs.items()}
    free, slow = med["tool_free"], med["slow_tool"]
    # Little's law: a slot holds a turn for `turn_slot_s` (tool-free, slots full); to keep every
    # slot busy while each turn's tool takes sleep_s, this many episodes must be in flight.
    turns = statistics.median(r["turns_mean"] * r["episodes"] for r in runs["tool_free"])
    turn_slot_s = free["seconds"] * (1 - free["waited_s"] / free["seconds"]) * args.slots / turns
    ratio = slow["busy_share"] / free["busy_share"]
    return {"medians": med,
            "busy_ratio": ratio,
            "busy_ratio_per_repeat": [s["busy_share"] / f["busy_share"]
                                      for s, f in zip(runs["slow_tool"], runs["tool_free"])],
            "episodes_per_s_ratio": slow["episodes_per_s"] / free["episodes_per_s"],
            "tokens_per_s_ratio": slow["tokens_per_s"] / free["tokens_per_s"],
            "turn_slot_s": turn_slot_s,
            "in_flight_needed": args.slots * (1 + args.sleep_s * args.tool_turns / (turns / args.rows) / turn_slot_s),
            "goal": GOAL, "met": ratio >= GOAL}


def run(args, command: str) -> int:
    if args.rows % args.group_size or args.rows < 1:
        raise SystemExit(f"llamarl bench env-busy: --rows={args.rows} must be a positive multiple of "
                         f"--group-size={args.group_size}")
    at_start = machine(threads=args.threads)
    torch.set_num_threads(args.threads)
    env_file = write_env(args.work_dir, args.tool_turns, args.sleep_s)
    model, tok, stops = build_model(args)
    gens = {v: make_generator(args, model, tok, stops, f"{env_file}:{cls}") for v, cls in VARIANTS.items()}
    try:
        for g in gens.values():
            measure(g, chunk=0)  # warm-up, untimed: the environment workers start, the engine warms
        runs: dict = {v: [] for v in VARIANTS}
        for r, v in alternating(VARIANTS, args.repeats):  # both variants run chunk 1 + r
            runs[v].append(measure(gens[v], chunk=1 + r))
    finally:
        for g in gens.values():
            g.close()
    result = {"command": command, "commit": git_commit(),
              "description": "generator busy share (1 - seconds its episode runner blocked on the environment "
                             "with nothing to decode / wall seconds of the chunk) with a tool that answers at once "
                             "vs one that sleeps --sleep-s per call; the environment takes each of the first "
                             "tool_turns assistant turns as a tool call whatever the model wrote (a random model "
                             "cannot write one), turns end on planted stop tokens (tiny preset) or eos; busy "
                             "counts every engine step however few rows it decodes: rows_per_step and "
                             "tokens_per_s_ratio show the throughput the slow tool costs",
              "config": {**{k: v for k, v in vars(args).items() if k not in ("out", "work_dir")},
                         "stop_token_ids": stops, "variants": VARIANTS},
              "runs": runs, **summarize(runs, args), "machine": ended(at_start)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print_table(result)
    return 0


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    cfg, med = result["config"], result["medians"]
    t = Table(title=f"env-busy: {cfg['rows']} episodes over {cfg['slots']} slots, {cfg['tool_turns']} tool calls "
                    f"each, slow tool {cfg['sleep_s']} s (medians of {cfg['repeats']})")
    for col in ("variant", "busy share", "waited s", "wall s", "episodes/s", "tokens/s", "in flight", "rows/step"):
        t.add_column(col, justify="right")
    for v, m in med.items():
        t.add_row(v, f"{m['busy_share']:.3f}", f"{m['waited_s']:.2f}", f"{m['seconds']:.2f}",
                  f"{m['episodes_per_s']:.2f}", f"{m['tokens_per_s']:.0f}", f"{m['mean_in_flight']:.1f}", f"{m['rows_per_step']:.1f}")
    console = Console()
    console.print(t)
    console.print(f"busy ratio slow/free {result['busy_ratio']:.3f} (goal >= {result['goal']}: "
                  f"{'met' if result['met'] else 'MISSED'}); episodes in flight needed ~{result['in_flight_needed']:.0f}"
                  f", at most {cfg['rows']} here", highlight=False)
