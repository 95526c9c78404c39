"""Benchmark: our GenerationEngine vs transformers' `generate`, same weights, greedy, float32, CPU.

Every case (model size x thread count) runs both engines in the same process, alternating
which goes first each repeat, so machine noise (the box is shared) hits both; we report
medians. Also measures int8 weight-only generation speed and the token-level KL of int8 and
fp8 (CPU-emulated) next-token distributions against full precision.

Long tail (`long_tail` in the JSON): continuous vs static batching on the same weights and
prompts, sampled at T = 1 with stop tokens planted by a fixed seed (a random model's
next-token distribution is near uniform, so each token stops a row with probability
~stops/vocab: geometric lengths capped at `--long-tail-new-tokens`, max/mean ~3). Tokens/s
counts the tokens each mode actually generated. Two static baselines: `static` is the
engine's static mode (a chunk runs until its longest row ends, but finished rows are
compacted out once at most half still run, as the engine did before continuous batching);
`static_padded` keeps every finished row in the batch until its chunk ends (what
`transformers.generate` does, and what a GPU decode step costs whatever the live rows).

    llamarl bench generation --threads 1 --out benchmarks/results/generation_cpu.json
    llamarl bench generation --quick   # ~2 minutes; the JSON in ./runs/bench/generation-<time>/
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

from llamarl_core.bench.provenance import ended, git_commit, load_average, machine
from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.quant import next_token_kl, quantize_model
from llamarl_core.models import ByteTokenizer, Llama, get_preset, save_pretrained


def parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="tiny-2m,tiny-20m,tiny-100m", help="comma-separated presets")
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per engine and case")
    parser.add_argument("--no-quant", action="store_true", help="skip the int8/fp8 measurements")
    parser.add_argument("--quick", action="store_true", help="tiny-2m,tiny-20m; 1 thread; 2 repeats")
    parser.add_argument("--long-tail-preset", default="tiny-2m", help="model for the long-tail case ('' skips it)")
    parser.add_argument("--long-tail-prompts", type=int, default=256)
    parser.add_argument("--long-tail-new-tokens", type=int, default=96, help="the length cap")
    parser.add_argument("--long-tail-stops", type=int, default=8, help="planted stop tokens (of 260)")
    return parser


def alternating(names, repeats: int) -> list[tuple]:
    """(repeat, name): every name once per repeat, in order on even repeats and reversed on odd
    ones, so the shared machine's noise hits each alike (every engine bench runs in this order)."""
    names = list(names)
    return [(r, n) for r in range(repeats) for n in (names if r % 2 == 0 else names[::-1])]


def time_alternating(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Wall seconds of each of `fns` per repeat, run in `alternating` order."""
    times: dict = {name: [] for name in fns}
    for _, name in alternating(fns, repeats):
        start = time.perf_counter()
        fns[name]()
        times[name].append(time.perf_counter() - start)
    return times


def ours_vs_hf(ours, theirs, repeats: int, tokens: int) -> dict:
    """Seconds, medians, tokens/s and the speed ratio of our engine (`ours`) against
    `transformers.generate` (`theirs`), each making `tokens` new tokens per call."""
    times = time_alternating({"ours": ours, "hf": theirs}, repeats)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"raw_seconds": times, "median_seconds": med, "tokens_per_s": {k: tokens / v for k, v in med.items()},
            "ratio_vs_hf": med["hf"] / med["ours"]}


def build(preset: str, tmp: str):
    import transformers

    torch.manual_seed(0)
    model = Llama(get_preset(preset)).eval().requires_grad_(False)  # as a generator holds it
    tokenizer = ByteTokenizer()
    save_pretrained(model, tokenizer, tmp)  # the HF side loads the very same weights
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # run all new tokens, like ignore_eos below
    hf.generation_config.pad_token_id = tokenizer.pad_id
    return model, tokenizer, hf


def run_case(model, tokenizer, hf, prompts: torch.Tensor, args) -> dict:
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0, ignore_eos=True)
    engine = GenerationEngine(model, tokenizer, max_batch_size=args.batch_size)
    prompt_lists = prompts.tolist()
    mask = torch.ones_like(prompts)
    result = {}

    def ours():
        result["ours"] = engine.generate(prompt_lists, params, seed=0)

    def theirs():
        with torch.inference_mode():
            result["hf"] = hf.generate(prompts, attention_mask=mask, max_new_tokens=args.new_tokens,
                                       do_sample=False)

    ours(), theirs()  # warm-up
    timing = ours_vs_hf(ours, theirs, args.repeats, args.batch_size * args.new_tokens)
    hf_tokens = result["hf"][:, prompts.shape[1]:].tolist()
    same = sum(c.token_ids == h for c, h in zip(result["ours"], hf_tokens)) / len(hf_tokens)
    return {**timing, "greedy_rows_identical": same}


def run_quant(model, tokenizer, prompts: torch.Tensor, args) -> dict:
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0, ignore_eos=True)
    full = GenerationEngine(model, tokenizer, max_batch_size=args.batch_size)
    int8 = GenerationEngine(model, tokenizer, max_batch_size=args.batch_size, quantization="int8")
    outs = full.generate(prompts.tolist(), params, seed=0)
    int8.generate(prompts.tolist(), params, seed=0)  # warm-up
    times = time_alternating({name: (lambda e=engine: e.generate(prompts.tolist(), params, seed=0))
                              for name, engine in (("none", full), ("int8", int8))}, args.repeats)
    seqs = torch.tensor([p + c.token_ids for p, c in zip(prompts.tolist(), outs)])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"raw_seconds": times, "median_seconds": med,
            "int8_speed_ratio": med["none"] / med["int8"],
            "kl_int8": next_token_kl(model, quantize_model(model, "int8"), seqs),
            "kl_fp8_emulated": next_token_kl(model, quantize_model(model, "fp8"), seqs)}


def run_long_tail(args) -> dict:
    torch.manual_seed(0)
    model, tokenizer = Llama(get_preset(args.long_tail_preset)).eval().requires_grad_(False), ByteTokenizer()
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 256, (args.long_tail_prompts, args.prompt_len), generator=gen).tolist()
    stops = sorted(torch.randperm(256, generator=gen)[:args.long_tail_stops].tolist())
    params = SamplingParams(max_new_tokens=args.long_tail_new_tokens, temperature=1.0,
                            stop_token_ids=tuple(stops), ignore_eos=True)
    engines = {mode: GenerationEngine(model, tokenizer, max_batch_size=args.batch_size, batching=mode)
               for mode in ("continuous", "static")}
    engines["static_padded"] = GenerationEngine(model, tokenizer, max_batch_size=args.batch_size,
                                                batching="static", compact_finished_rows=False)
    for engine in engines.values():
        engine.generate(prompts[:args.batch_size], params, seed=1)  # warm-up
    times, tokens, lengths = {m: [] for m in engines}, {m: [] for m in engines}, []
    for repeat, mode in alternating(engines, args.repeats):
        start = time.perf_counter()
        out = engines[mode].generate(prompts, params, seed=repeat)
        times[mode].append(time.perf_counter() - start)
        tokens[mode].append(sum(len(c.token_ids) for c in out))
        lengths += [len(c.token_ids) for c in out]
    rate = {m: statistics.median(n / t for n, t in zip(tokens[m], times[m])) for m in engines}
    mean = sum(lengths) / len(lengths)
    return {"preset": args.long_tail_preset, "prompts": len(prompts), "max_batch_size": args.batch_size,
            "max_new_tokens": args.long_tail_new_tokens, "stop_token_ids": stops,
            "mean_new_tokens": mean, "max_to_mean_new_tokens": max(lengths) / mean,
            "raw_seconds": times, "tokens": tokens,
            "continuous_tokens_per_s": rate["continuous"], "static_tokens_per_s": rate["static"],
            "ratio": rate["continuous"] / rate["static"],
            "static_padded_tokens_per_s": rate["static_padded"],
            "ratio_vs_padded": rate["continuous"] / rate["static_padded"],
            "load_average": load_average()}


def run(args, command: str) -> int:
    from rich.console import Console
    from rich.table import Table

    if args.quick:
        args.sizes, args.threads, args.repeats = "tiny-2m,tiny-20m", "1", 2
    sizes, threads = args.sizes.split(","), [int(t) for t in args.threads.split(",")]
    import transformers

    report = {"command": command, "torch": torch.__version__,
              "transformers": transformers.__version__, "machine": machine(),
              "settings": {k: v for k, v in vars(args).items() if k != "out"}, "cases": []}
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 256, (args.batch_size, args.prompt_len), generator=gen)
    for preset in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            model, tokenizer, hf = build(preset, tmp)
        n_params = sum(p.numel() for p in model.parameters())
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            case = {"preset": preset, "params": n_params, "threads": n_threads,
                    **run_case(model, tokenizer, hf, prompts, args)}
            report["cases"].append(case)
            print(f"{preset} threads={n_threads}: ours {case['median_seconds']['ours']:.2f}s "
                  f"hf {case['median_seconds']['hf']:.2f}s ratio {case['ratio_vs_hf']:.2f}", flush=True)
        if not args.no_quant:
            torch.set_num_threads(1)
            report.setdefault("quantization", []).append({"preset": preset, "threads": 1,
                                                          **run_quant(model, tokenizer, prompts, args)})
    if args.long_tail_preset:
        torch.set_num_threads(1)
        report["long_tail"] = lt = run_long_tail(args)
        print(f"long tail ({lt['preset']}, max/mean {lt['max_to_mean_new_tokens']:.2f}): continuous "
              f"{lt['continuous_tokens_per_s']:.0f} tok/s, static {lt['static_tokens_per_s']:.0f} tok/s, "
              f"ratio {lt['ratio']:.2f}; static padded {lt['static_padded_tokens_per_s']:.0f} tok/s, "
              f"ratio {lt['ratio_vs_padded']:.2f}", flush=True)
    table = Table(title=f"generation, batch {args.batch_size}, prompt {args.prompt_len}, "
                        f"{args.new_tokens} new tokens, greedy fp32 (medians)")
    for col in ("model", "params", "threads", "ours tok/s", "HF tok/s", "ratio vs HF", "same tokens"):
        table.add_column(col, justify="right")
    for c in report["cases"]:
        table.add_row(c["preset"], f"{c['params'] / 1e6:.1f}M", str(c["threads"]),
                      f"{c['tokens_per_s']['ours']:.0f}", f"{c['tokens_per_s']['hf']:.0f}",
                      f"{c['ratio_vs_hf']:.2f}x", f"{c['greedy_rows_identical']:.0%}")
    console = Console()
    console.print(table)
    if report.get("quantization"):
        qtable = Table(title="int8 weight-only (1 thread) and fp8 (CPU-emulated) vs full precision")
        for col in ("model", "int8 speed vs fp32", "KL int8", "KL fp8"):
            qtable.add_column(col, justify="right")
        for q in report["quantization"]:
            qtable.add_row(q["preset"], f"{q['int8_speed_ratio']:.2f}x", f"{q['kl_int8']:.2e}",
                           f"{q['kl_fp8_emulated']:.2e}")
        console.print(qtable)
    report["commit"] = git_commit()
    report["machine"] = ended(report["machine"])
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=2)
    return 0
