"""Benchmark: the trainer's busy seconds per RL step and its peak memory, full fine-tuning vs
LoRA (issue #48), on SmolLM2-135M with smollm2_cpu's batch.

Each variant runs in a fresh process (so its peak resident set, the kernel's VmHWM, is its own),
variants alternating, `--repeats` processes each. A process builds the model as the trainer does
(executors/trainer_model.py, non-sharded path: `build_model` in the fp32 master dtype, then
`apply_lora` when `model.lora.rank > 0`), a `Learner` from the recipe's config
(executors/pipeline.py `learner_config`) and runs `train_on` (executors/train_step.py, the step
the trainer runs) on one synthetic rollout: `prompts_per_step` x `group_size` rows of ~40 prompt
and 10-30 completion tokens (smollm2_cpu's shapes), rewards mixed in every group so no row is
skipped. One warm-up step, then `--steps` timed ones; one torch thread, as the trainer role has.

Reported per variant: median busy s/step, peak RSS, the optimizer's state bytes (what AdamW
allocated: it creates state only for parameters that received a gradient) and the gradient
bytes (every trainable parameter's). Where the `Learner` still builds AdamW over every parameter
(frozen ones included), the bench replaces it with one over the trainable parameters only (as
`optimizer_rebuilt_by_bench` records): AdamW's state is the same either way. Ratios LoRA/full against the issue's goals (s/step <= 0.7,
peak memory <= 0.6).

    llamarl bench lora-trainer --out benchmarks/results/lora_trainer_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from llamarl_core.bench.provenance import ROOT, ended, git_commit, machine

DEFAULT_CHECKPOINT = ROOT / "models" / "smollm2-135m"
RECIPE = "smollm2_cpu"
GOALS = {"step_s_ratio": 0.7, "peak_rss_ratio": 0.6}


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="processes per variant, alternating")
    p.add_argument("--steps", type=int, default=2, help="timed steps per process (after one warm-up)")
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the recipe (smollm2_cpu)")
    return p


def synthetic_rollout(rows: int, group_size: int, vocab: int, seed: int = 0):
    """`rows` rows of ~40 prompt + 10-30 completion tokens; every group half right, half wrong."""
    from llamarl_core.wire.rollout import Rollout

    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(36, 45, (rows,), generator=g)
    completion_lens = torch.randint(10, 31, (rows,), generator=g)
    tokens = torch.zeros(rows, int((prompt_lens + completion_lens).max()), dtype=torch.long)
    for r in range(rows):
        used = int(prompt_lens[r] + completion_lens[r])
        tokens[r, :used] = torch.randint(100, vocab, (used,), generator=g)
    behavior = -torch.rand(rows, tokens.shape[1] - 1, generator=g)
    rewards = (torch.arange(rows) % 2).float()  # both outcomes in every group: no zero advantage
    return Rollout(tokens, prompt_lens, completion_lens, behavior, rewards, torch.arange(rows) // group_size, 0, 0, 0)


def _vm_hwm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def child(variant: str, checkpoint: str, rank: int, steps: int, overrides: list[str]) -> dict:
    """One variant in this process: build as the trainer does, one warm-up step, `steps` timed."""
    from llamarl_core.config.load import load_config
    from llamarl_core.algorithms.optimizer import policy_optimizer
    from llamarl_core.executors.learner import Learner
    from llamarl_core.executors.pipeline import learner_config
    from llamarl_core.executors.train_step import train_on
    from llamarl_core.executors.trainer_model import MASTER_DTYPE
    from llamarl_core.models.build import build_model
    from llamarl_core.models.lora import apply_lora

    torch.set_num_threads(1)
    lora_words = [f"model.lora.rank={rank}"] if variant == "lora" else []
    cfg = load_config(RECIPE, [f"model.checkpoint={checkpoint}", *overrides, *lora_words])
    model, _ = build_model(cfg.model, dtype=MASTER_DTYPE, device="cpu", seed=cfg.run.seed)
    if cfg.model.lora.enabled:
        lo = cfg.model.lora
        apply_lora(model, lo.rank, lo.scale, lo.target_modules, lo.dropout, seed=cfg.run.seed)
    rss_built = _vm_hwm_bytes()
    learner = Learner(model, learner_config(cfg))
    a = cfg.algorithm
    trainable = [p for p in model.parameters() if p.requires_grad]
    learner_optimizer_params = sum(p.numel() for g in learner.optimizer.param_groups for p in g["params"])
    rebuilt = learner_optimizer_params != sum(p.numel() for p in trainable)
    if rebuilt:  # the Learner's AdamW spans frozen weights too: over the adapters only, as it will be
        lc = learner.cfg
        learner.optimizer = policy_optimizer(trainable, a.lr, a.weight_decay, "rl", lc.adam_betas, lc.adam_eps,
                                             fused=True)
    batch = synthetic_rollout(a.prompts_per_step * a.group_size, a.group_size, model.args.vocab_size)
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        train_on(learner, batch, torch.zeros(batch.num_rows))
        if i:
            times.append(time.perf_counter() - t0)
    state_bytes = sum(t.numel() * t.element_size() for s in learner.optimizer.state.values()
                      for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
    return {"variant": variant, "step_s_all": times, "peak_rss_bytes": _vm_hwm_bytes(),
            "peak_rss_after_build_bytes": rss_built,
            "trainable_params": sum(p.numel() for p in trainable),
            "total_params": sum(p.numel() for p in model.parameters()),
            "optimizer_params": sum(p.numel() for g in learner.optimizer.param_groups for p in g["params"]),
            "learner_optimizer_params": learner_optimizer_params, "optimizer_rebuilt_by_bench": rebuilt,
            "optimizer_state_bytes": state_bytes,
            "gradient_bytes": sum(p.numel() * p.element_size() for p in trainable),
            "rows": batch.num_rows, "completion_tokens": int(batch.completion_lens.sum()),
            "positions": int((batch.prompt_lens + batch.completion_lens).sum()),
            "micro_batch_size": cfg.resources.trainer.micro_batch_size}


def _spawn(variant: str, args) -> dict:
    cmd = [sys.executable, "-m", "llamarl_core.bench.lora_trainer", variant, args.checkpoint, str(args.rank),
           str(args.steps), *args.overrides]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{variant} child exited {out.returncode}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    """Medians over processes (step time: over every timed step) of one variant's runs."""
    first = runs[0]
    fixed = ("trainable_params", "total_params", "optimizer_params", "learner_optimizer_params",
             "optimizer_rebuilt_by_bench", "optimizer_state_bytes", "gradient_bytes",
             "rows", "completion_tokens", "positions", "micro_batch_size")
    return {"step_s": statistics.median(t for r in runs for t in r["step_s_all"]),
            "peak_rss_bytes": statistics.median(r["peak_rss_bytes"] for r in runs),
            "peak_rss_after_build_bytes": statistics.median(r["peak_rss_after_build_bytes"] for r in runs),
            **{k: first[k] for k in fixed}, "runs": runs}


def ratios(full: dict, lora: dict) -> dict:
    out = {"step_s_ratio": lora["step_s"] / full["step_s"],
           "peak_rss_ratio": lora["peak_rss_bytes"] / full["peak_rss_bytes"],
           "optimizer_state_ratio": lora["optimizer_state_bytes"] / max(full["optimizer_state_bytes"], 1),
           "gradient_bytes_ratio": lora["gradient_bytes"] / full["gradient_bytes"]}
    out["meets_goals"] = {k: out[k] <= v for k, v in GOALS.items()}
    return out


def run(args, command: str) -> int:
    at_start = machine(threads=1)
    runs: dict = {"full": [], "lora": []}
    for r in range(args.repeats):
        for variant in (("full", "lora") if r % 2 == 0 else ("lora", "full")):
            runs[variant].append(_spawn(variant, args))
            last = runs[variant][-1]
            print(f"{variant}: {statistics.median(last['step_s_all']):.2f} s/step, peak "
                  f"{last['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)
    full, lora = summary(runs["full"]), summary(runs["lora"])
    result = {"benchmark": "lora_trainer", "command": command, "commit": git_commit(), "recipe": RECIPE,
              "checkpoint": args.checkpoint, "rank": args.rank, "overrides": args.overrides, "threads": 1,
              "note": args.note, "goals": GOALS, "full": full, "lora": lora, "ratios": ratios(full, lora),
              "machine": ended(at_start)}
    _print(result)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _print(r: dict) -> None:
    gib = 2**30
    print(f"{'':<6}{'s/step':>8}{'peak GiB':>10}{'optim MiB':>11}{'grads MiB':>11}{'trainable':>12}")
    for v in ("full", "lora"):
        x = r[v]
        print(f"{v:<6}{x['step_s']:>8.2f}{x['peak_rss_bytes'] / gib:>10.2f}{x['optimizer_state_bytes'] / 2**20:>11.1f}"
              f"{x['gradient_bytes'] / 2**20:>11.1f}{x['trainable_params']:>12,}")
    q = r["ratios"]
    print(f"LoRA/full: s/step {q['step_s_ratio']:.2f} (goal <= {GOALS['step_s_ratio']}), peak memory "
          f"{q['peak_rss_ratio']:.2f} (goal <= {GOALS['peak_rss_ratio']})")


if __name__ == "__main__":  # one variant's process: VARIANT CHECKPOINT RANK STEPS [OVERRIDES...]
    variant, checkpoint, rank, steps, *words = sys.argv[1:]
    print(json.dumps(child(variant, checkpoint, int(rank), int(steps), words)))
