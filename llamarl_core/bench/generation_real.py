"""Benchmark on the real model: our GenerationEngine vs `transformers.generate` on the same
converted SmolLM2-135M-Instruct weights, and prefill once per group vs every copy prefilled.

Prompts are the smollm2_cpu recipe's: chat-templated (ChatML, its short system prompt) built-in
arithmetic problems, asking for a \\boxed{} answer. Two prompt sets per thread count:
`distinct` (64 different prompts) and `groups` (8 prompts x G = 8 samples each, what a rollout
chunk of the recipe holds: HF prefills all 64 rows, the engine each prompt once). Both engines sample (T, no top-k/top-p) and
run exactly `--new-tokens` tokens per row (EOS ignored on both sides), so they do the same work;
their tokens differ (different random streams), their speed is what is compared. HF gets the
batch left-padded with an attention mask, as it needs; each case alternates which engine goes
first per repeat (the machine is shared) and reports medians.

Prefill once (`prefill_once`): `--groups` prompts x G = `--group-size` samples each, as a rollout
chunk holds them, sampled with the recipe's settings (EOS stops rows); the engine's own
counters give the prefill seconds (`last_stats`), the rest of the call is decode. The tokens are
the same with and without it (same seed; tested in tests/unit/test_prefill_once.py), so both
runs do the same decode work. Target: the prefill share of generation time drops by at least
(G-1)/G of itself.

    llamarl bench generation-real models/smollm2-135m --out benchmarks/results/generation_real_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from llamarl_core.bench.generation import ours_vs_hf
from llamarl_core.bench.provenance import ended, git_commit, load_average, machine
from llamarl_core.data.arith import arith_examples
from llamarl_core.data.templates import PromptFormat, render_prompt
from llamarl_core.generation import GenerationEngine, SamplingParams, cpu_gemm
from llamarl_core.models import load_pretrained

SYSTEM_PROMPT, INSTRUCTION = "Be brief.", "Put the final answer in \\boxed{}."  # recipes/smollm2_cpu.yaml


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="the converted directory (llamarl models get smollm2-135m DIR)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--groups", type=int, default=8, help="prompts in the prefill-once case (0 skips it)")
    return p


def recipe_prompts(tokenizer, n: int) -> list[list[int]]:
    fmt = PromptFormat("chat", SYSTEM_PROMPT, INSTRUCTION)
    examples = arith_examples("train", n, 0, digits=1, num_operands=3)
    return [tokenizer.encode(render_prompt(e, fmt, tokenizer)) for e in examples]


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):], mask[r, width - len(p):] = torch.tensor(p), 1
    return ids, mask


def versus_hf(model, tokenizer, hf, prompts, args) -> dict:
    """Both engines on the same batch, alternating which goes first per repeat."""
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=args.temperature, ignore_eos=True)
    engine = GenerationEngine(model, tokenizer, max_batch_size=args.batch_size)
    ids, mask = left_padded(prompts, tokenizer.pad_id)

    def ours(n=args.new_tokens):
        engine.generate(prompts, SamplingParams(max_new_tokens=n, temperature=args.temperature, ignore_eos=True)
                        if n != args.new_tokens else params, seed=0)

    def theirs(n=args.new_tokens):
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=True,
                              temperature=args.temperature, top_k=0, top_p=1.0, eos_token_id=None,
                              pad_token_id=tokenizer.pad_id)
        assert out.shape[1] == ids.shape[1] + n, out.shape

    ours(4), theirs(4)  # warm-up (allocations, thread pools)
    return {**ours_vs_hf(ours, theirs, args.repeats, len(prompts) * args.new_tokens), "load_average": load_average()}


def prefill_once_case(model, tokenizer, args) -> dict:
    g = args.group_size
    prompts = [p for p in recipe_prompts(tokenizer, args.groups) for _ in range(g)]
    params = SamplingParams(max_new_tokens=32, temperature=args.temperature)
    out = {}
    for name, once in (("prefill_once", True), ("every_copy", False)):
        engine = GenerationEngine(model, tokenizer, max_batch_size=len(prompts), prefill_once=once)
        engine.generate(prompts[:g], SamplingParams(max_new_tokens=2, temperature=args.temperature), seed=0)
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            done = engine.generate(prompts, params, seed=0)
            total = time.perf_counter() - start
            stats = dict(engine.last_stats)
            runs.append({"total_s": total, "prefill_s": stats["prefill_s"], "prefill_share": stats["prefill_s"] / total,
                         "prefill_tokens": stats["prefill_tokens"], "prompt_tokens": stats["prompt_tokens"],
                         "new_tokens": sum(len(c.token_ids) for c in done)})
        out[name] = {**{k: statistics.median(r[k] for r in runs) for k in runs[0]}, "runs": runs}
    share_drop = 1 - out["prefill_once"]["prefill_share"] / out["every_copy"]["prefill_share"]
    seconds_drop = 1 - out["prefill_once"]["prefill_s"] / out["every_copy"]["prefill_s"]
    # With prefill P and decode D seconds, exact 1/G prefill work gives a share of
    # (P/G)/(P/G + D) against P/(P + D): a drop of 1 - (P + D)/(P + G*D) < (G-1)/G for every
    # D > 0. The share target is reachable only by making decode slower; the prefill seconds
    # are what prefill-once cuts, and they are held to (G-1)/G too.
    prefill, decode = out["every_copy"]["prefill_s"], out["every_copy"]["total_s"] - out["every_copy"]["prefill_s"]
    return {"group_size": g, "groups": args.groups, "rows": len(prompts), **out,
            "prefill_s_drop": seconds_drop,
            "prefill_share_drop": share_drop, "target_share_drop": (g - 1) / g,
            "meets_target": share_drop >= (g - 1) / g,
            "meets_target_in_seconds": seconds_drop >= (g - 1) / g,
            "share_drop_bound_at_exact_1_over_g": 1 - (prefill + decode) / (prefill + g * decode),
            "generation_speedup": out["every_copy"]["total_s"] / out["prefill_once"]["total_s"],
            "load_average": load_average()}


def run(args, command: str) -> int:
    import transformers

    report = {"command": command, "commit": git_commit(), "torch": torch.__version__,
              "transformers": transformers.__version__, "machine": machine(),
              "settings": {k: v for k, v in vars(args).items() if k != "out"}, "cases": []}
    model, tokenizer = load_pretrained(args.checkpoint, dtype=torch.float32)
    model = model.eval().requires_grad_(False)
    hf = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).eval()
    prompts = recipe_prompts(tokenizer, args.batch_size)
    g = args.group_size
    prompt_sets = {"distinct": prompts,
                   "groups": [p for p in recipe_prompts(tokenizer, args.batch_size // g) for _ in range(g)]}
    report["prompt_tokens"] = {"min": min(map(len, prompts)), "max": max(map(len, prompts)),
                               "shared_prefix": len(os.path.commonprefix([tuple(p) for p in prompts]))}
    for n_threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(n_threads)
        for name, batch in prompt_sets.items():
            case = {"threads": n_threads, "prompts": name, "batch_size": len(batch), "new_tokens": args.new_tokens,
                    **versus_hf(model, tokenizer, hf, batch, args)}
            report["cases"].append(case)
            print(f"threads={n_threads} {name}: ours {case['tokens_per_s']['ours']:.0f} tok/s, "
                  f"hf {case['tokens_per_s']['hf']:.0f} tok/s, ratio {case['ratio_vs_hf']:.2f}", flush=True)
    torch.set_num_threads(1)
    if args.groups:
        report["prefill_once"] = po = prefill_once_case(model, tokenizer, args)
        print(f"prefill once, G={po['group_size']} (1 thread): prefill share {po['every_copy']['prefill_share']:.2f} -> "
          f"{po['prefill_once']['prefill_share']:.2f} (drop {po['prefill_share_drop']:.2f}, target "
          f"{po['target_share_drop']:.2f}); prefill seconds drop {po['prefill_s_drop']:.2f}; "
          f"generation {po['generation_speedup']:.2f}x faster", flush=True)
    report["cpu_gemm_choices"] = {" x ".join(map(str, k[:3])) + f" bias={k[3]} threads={k[4]}": v
                                  for k, v in sorted(cpu_gemm.choices().items())}  # rows bucket x in x out
    report["machine"] = ended(report["machine"])
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0
