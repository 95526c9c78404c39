"""Benchmark: how the generator should apply a LoRA policy, merged or unmerged (issue #48).

    merged    after each sync, W = W_base + s·B@A for every target (all layers), written into
              the engine's weights; decode runs the plain projections. Costs the merge per sync
              (and a kept copy of W_base for the targets: the next sync merges from it).
    unmerged  the engine's projections compute y = x Wᵀ + s·(x Aᵀ)Bᵀ with W = W_base untouched;
              no merge, but two thin GEMMs more per projection per decode step. A fused
              projection (qkv, w1|w3) runs one GEMM with its targets' A stacked [k·r, in] and one
              with their s·B block-diagonal [out, k·r].

The unmerged variant lives here only (a comparison mode the engine does not need unless this
bench says so): `LoraProj` wraps the engine's own `Proj` callables (generation/fused.py).

Break-even: merged pays `merge_s` per sync, unmerged `extra_s_per_step` per decode step, so
merged wins while syncs per decode step < extra_s_per_step / merge_s.

Prompts are smollm2_cpu's (chat-templated arithmetic); every row decodes exactly
`--new-tokens` (EOS ignored); the engine's prefill counter is taken off so decode is what is
timed. Variants alternate within each repeat (the machine is shared); medians are reported,
and each variant's fastest run beside them (`*_min`: on a loaded machine, the least disturbed).

    llamarl bench lora-apply --out benchmarks/results/lora_apply_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from llamarl_core.bench.provenance import ROOT, ended, git_commit, machine
from llamarl_core.config.choices import LORA_TARGETS
from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.fused import BLOCK_PROJECTIONS
from llamarl_core.models.lora import TARGET_PATHS, init_a, merged

DEFAULT_CHECKPOINT = ROOT / "models" / "smollm2-135m"

Adapters = dict  # "layers.<i>.<path>" -> (A [r, in], B [out, r]), float32


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=None, help=f"converted HF directory (default {DEFAULT_CHECKPOINT})")
    p.add_argument("--preset", default=None, help="a model preset instead of a checkpoint (random weights)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--targets", default=",".join(LORA_TARGETS))
    p.add_argument("--batch-sizes", default="16,64")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the generator role runs one)")
    p.add_argument("--note", default="", help="what else ran on the machine")
    return p


def random_adapters(model, rank: int, targets, seed: int = 0, b_std: float = 0.01) -> Adapters:
    """A trained-looking adapter per target of every block: A as PEFT inits it, B ~ N(0, b_std²)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i, layer in enumerate(model.layers):
        for t in targets:
            w = layer.get_submodule(TARGET_PATHS[t]).weight
            out[f"layers.{i}.{TARGET_PATHS[t]}"] = (init_a((rank, w.shape[1]), g),
                                                   b_std * torch.randn(w.shape[0], rank, generator=g))
    return out


def base_copy(model, adapters: Adapters) -> dict:
    """W_base of every target: what a merged generator keeps to merge each new adapter into."""
    return {path: model.get_submodule(path).weight.detach().clone() for path in adapters}


@torch.no_grad()
def merge(model, base: dict, adapters: Adapters, scale: float) -> None:
    """One sync's merge: W = W_base + s·B@A into every target's weight (the engine's storage)."""
    for path, (a, b) in adapters.items():
        w = model.get_submodule(path).weight
        merged(base[path], a, b, scale, out=w.data)  # the generator's own rule (generation/lora_merge.py)


@torch.no_grad()
def restore(model, base: dict) -> None:
    for path, w in base.items():
        model.get_submodule(path).weight.data.copy_(w)


class LoraProj:
    """y = base(x) + (x Aᵀ)(s·B)ᵀ: `a` [k·r, in] the projection's targets' A stacked, `b_scaled`
    [out, k·r] their s·B block-diagonal (rows of a target without an adapter stay zero)."""

    def __init__(self, base, a: torch.Tensor, b_scaled: torch.Tensor):
        self.base, self.a, self.b_scaled = base, a, b_scaled
        self.weight = base.weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)                                          # [..., out]
        return y.add_(F.linear(F.linear(x, self.a), self.b_scaled))  # [..., k·r] -> [..., out]


def unmerged_projections(proj: dict, model, adapters: Adapters, scale: float) -> dict:
    """The engine's projections (`engine.weights.current()`) with every adapted one wrapped."""
    out = dict(proj)
    for i, layer in enumerate(model.layers):
        for key, modules in BLOCK_PROJECTIONS:
            paths = [f"layers.{i}.{m}" for m in modules]
            if not any(p in adapters for p in paths):
                continue
            outs = [layer.get_submodule(m).weight.shape[0] for m in modules]
            pairs = [adapters.get(p) for p in paths]
            rank, dim = next(ab[0].shape for ab in pairs if ab is not None)
            w = proj[f"{i}.{key}"].weight
            a = torch.zeros(rank * len(paths), dim, dtype=w.dtype)
            b = torch.zeros(sum(outs), rank * len(paths), dtype=w.dtype)
            row = 0
            for j, (n_out, ab) in enumerate(zip(outs, pairs)):
                if ab is not None:
                    a[j * rank:(j + 1) * rank] = ab[0]
                    b[row:row + n_out, j * rank:(j + 1) * rank] = ab[1] * scale
                row += n_out
            out[f"{i}.{key}"] = LoraProj(proj[f"{i}.{key}"], a, b)
    return out


def _load(args):
    from llamarl_core.models import Llama, get_preset, load_pretrained
    from llamarl_core.models.tokenizer import ByteTokenizer

    if args.preset:
        torch.manual_seed(0)
        return Llama(get_preset(args.preset)), ByteTokenizer(), args.preset
    path = args.checkpoint or str(DEFAULT_CHECKPOINT)
    if not os.path.isdir(path):
        raise SystemExit(f"llamarl bench lora-apply: no checkpoint at {path} "
                         "(llamarl models get smollm2-135m models/smollm2-135m, or --preset NAME)")
    model, tokenizer = load_pretrained(path, dtype=torch.float32)
    return model, tokenizer, path


def _prompts(tokenizer, n: int, preset: bool) -> list[list[int]]:
    if preset:
        return [tokenizer.encode(f"{i % 9}+{i % 7}+{i % 5}=") for i in range(n)]
    from llamarl_core.bench.generation_real import recipe_prompts
    return recipe_prompts(tokenizer, n)


def _decode_s(engine, prompts, params) -> float:
    t0 = time.perf_counter()
    engine.generate(prompts, params, seed=0)
    return time.perf_counter() - t0 - engine.last_stats["prefill_s"]


def run(args, command: str) -> int:
    torch.set_num_threads(args.threads)
    at_start = machine(threads=args.threads)
    model, tokenizer, source = _load(args)
    model = model.eval().requires_grad_(False)
    targets = args.targets.split(",")
    scale = args.alpha / args.rank
    adapters = random_adapters(model, args.rank, targets)
    base = base_copy(model, adapters)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.3, ignore_eos=True)
    engine = GenerationEngine(model, tokenizer, max_batch_size=max(batch_sizes))
    plain = engine.weights.current()  # adopted: the weights are the engine's storage
    wrapped = unmerged_projections(plain, model, adapters, scale)

    merge_s = []
    for _ in range(max(5, args.repeats)):
        t0 = time.perf_counter()
        merge(model, base, adapters, scale)
        merge_s.append(time.perf_counter() - t0)
    cases = []
    for rows in batch_sizes:
        prompts = _prompts(tokenizer, rows, args.preset is not None)
        times = {"merged": [], "unmerged": []}
        for r in range(args.repeats + 1):  # round 0 warms up (allocations, GEMM kernel choices)
            for variant in (("merged", "unmerged") if r % 2 == 0 else ("unmerged", "merged")):
                if variant == "merged":
                    merge(model, base, adapters, scale)
                    engine.weights.proj = plain
                else:
                    restore(model, base)
                    engine.weights.proj = wrapped
                s = _decode_s(engine, prompts, params)
                if r:
                    times[variant].append(s)
        case = {"rows": rows, "new_tokens": args.new_tokens, "decode_s_all": times}
        for v, ts in times.items():
            step_s = statistics.median(ts) / args.new_tokens
            case[v] = {"decode_s_per_step": step_s, "decode_s_per_token": step_s / rows, "tokens_per_s": rows / step_s,
                       "decode_s_per_step_min": min(ts) / args.new_tokens}  # the least disturbed run
        extra = case["unmerged"]["decode_s_per_step"] - case["merged"]["decode_s_per_step"]
        case["unmerged_extra_s_per_step_min"] = (case["unmerged"]["decode_s_per_step_min"]
                                                 - case["merged"]["decode_s_per_step_min"])
        case["unmerged_extra_s_per_step"] = extra
        case["unmerged_slowdown"] = case["unmerged"]["decode_s_per_step"] / case["merged"]["decode_s_per_step"]
        case["break_even_syncs_per_decode_step"] = extra / statistics.median(merge_s) if extra > 0 else None
        case["break_even_decode_steps_per_sync"] = statistics.median(merge_s) / extra if extra > 0 else None
        cases.append(case)
    engine.weights.proj = plain
    restore(model, base)

    adapter_bytes = sum(a.numel() * 4 + b.numel() * 4 for a, b in adapters.values())
    result = {"benchmark": "lora_apply", "command": command, "commit": git_commit(), "model": source,
              "rank": args.rank, "alpha": args.alpha, "scale": scale, "targets": targets,
              "layers": len(model.layers), "threads": args.threads, "note": args.note,
              "merge_s_per_sync": statistics.median(merge_s), "merge_s_all": merge_s,
              "adapter_bytes": adapter_bytes,
              "merged_base_copy_bytes": sum(w.numel() * w.element_size() for w in base.values()),
              "cases": cases, "machine": ended(at_start)}
    _print(result)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _print(r: dict) -> None:
    print(f"LoRA rank {r['rank']}, {len(r['targets'])} targets x {r['layers']} layers; merge "
          f"{r['merge_s_per_sync'] * 1e3:.1f} ms per sync; {r['threads']} thread(s)")
    print(f"{'rows':>5}{'merged tok/s':>14}{'unmerged tok/s':>16}{'extra ms/step':>15}{'steps/sync break-even':>23}")
    for c in r["cases"]:
        be = c["break_even_decode_steps_per_sync"]
        print(f"{c['rows']:>5}{c['merged']['tokens_per_s']:>14.0f}{c['unmerged']['tokens_per_s']:>16.0f}"
              f"{c['unmerged_extra_s_per_step'] * 1e3:>15.2f}{'-' if be is None else f'{be:.1f}':>23}")
