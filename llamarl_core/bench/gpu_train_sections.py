"""The training sections of `scripts/gpu_check.py` (see bench/gpu_sections.py for the rules):

    train_step  one trainer step as a 1-GPU run builds it: FSDP2 (units as the runtime's), fp32
                master weights with bf16 compute, activation checkpointing; tokens/s, peak
                memory against the plan's estimate for the same step
    mismatch    μ (the bf16 engine that sampled) vs π (the trainer's bf16 recomputation) on the
                same weights, staleness 0: the train/generate mismatch alone
    train       a short async run of the GPU recipe (gpu_1x) with weight checksums; on CUDA its
                held-out accuracy must rise
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch

from llamarl_core.bench.gpu_sections import judge, model_for
from llamarl_core.bench.gpu_sizes import SIZES

GIB = 2**30


def _config(device: str, overrides: list[str]):
    from llamarl_core.config.load import load_config
    return load_config(SIZES[device]["train_recipe"], overrides)


def _rollout(rows: int, seq: int, vocab: int, group_size: int):
    from llamarl_core.wire.rollout import Rollout
    g = torch.Generator().manual_seed(3)
    prompt = seq // 4
    return Rollout(torch.randint(4, vocab, (rows, seq), generator=g), torch.full((rows,), prompt),
                   torch.full((rows,), seq - prompt), torch.full((rows, seq - 1), -2.0),
                   torch.randint(0, 2, (rows,), generator=g).float(),
                   torch.arange(rows) // group_size, 0, 0, 0)


def train_step(device: str, size: dict) -> dict:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from llamarl_core.executors.learner import Learner
    from llamarl_core.executors.train_step import train_on
    from llamarl_core.executors.pipeline import chunk_config, learner_config
    from llamarl_core.plan.memory import trainer_memory
    from llamarl_core.transport.parallel import apply_activation_checkpointing, apply_fsdp

    dist.init_process_group("nccl" if device == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        rows, seq = size["step_rows"], size["step_seq"]
        cfg = _config(device, [f"resources.trainer.micro_batch_size={rows}", "resources.trainer.dtype=bfloat16"])
        model, _ = model_for(device, size, dtype="float32")
        model.train()
        apply_activation_checkpointing(model)
        apply_fsdp(model, DeviceMesh(device, [0]), torch.bfloat16)
        learner = Learner(model, learner_config(cfg))
        batch = _rollout(rows, seq, model.args.vocab_size, cfg.algorithm.group_size)
        before = [p.detach().to_local().clone() for p in model.parameters()]
        train_on(learner, batch, torch.zeros(rows))  # warm-up (allocator, kernels)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for _ in range(size["step_repeats"]):
            metrics = train_on(learner, batch, torch.zeros(rows))
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / size["step_repeats"]
        moved = max(float((p.detach().to_local() - b).abs().max()) for p, b in zip(model.parameters(), before))
        planned = trainer_memory(model.args, fsdp=1, tp=1, pp=1, dtype="bfloat16", micro_batch=rows,
                                 seq_tokens=seq, activation_checkpointing=True).total
        out = {"rows": rows, "seq_tokens": seq, "params": model.args.num_params(), "step_seconds": round(seconds, 4),
               "tokens_per_s": round(rows * seq / seconds, 1), "loss": metrics["loss"], "grad_norm": metrics["grad_norm"],
               "max_weight_change": moved, "planned_gib": round(planned, 3),
               "peak_memory_gib": round(torch.cuda.max_memory_allocated() / GIB, 3) if device == "cuda" else None}
        checks = {"finite": (all(math.isfinite(v) for v in metrics.values()), "==", True),
                  "max_weight_change": (moved, ">", 0.0)}
        if device == "cuda":  # the plan's trainer estimate must hold what the step used
            checks["peak_memory_gib"] = (out["peak_memory_gib"], "<=", out["planned_gib"])
        return judge(out, checks)
    finally:
        dist.destroy_process_group()


def mismatch(device: str, size: dict) -> dict:
    import copy

    from llamarl_core.algorithms import importance_metrics
    from llamarl_core.executors.chunks import ChunkGenerator
    from llamarl_core.executors.learner import Learner, completion_targets
    from llamarl_core.executors.pipeline import chunk_config, learner_config
    from llamarl_core.executors.setup import PromptSet, encode_prompts, load_split
    from llamarl_core.models.build import build_model
    from llamarl_core.sft.warmstart import warmstart_sequences, warmstart_steps
    from llamarl_core.transport.parallel import apply_autocast

    n = size["mismatch_prompts"]
    cfg = _config(device, [f"warmstart.steps={size['warm_steps']}", f"algorithm.prompts_per_step={n}",
                           f"warmstart.batch_size={8 * n}", "generation.max_new_tokens=16",
                           "data.num_train_examples=512",
                           f"resources.generator.max_batch_size={n * 4}", "resources.trainer.dtype=bfloat16",
                           "resources.generator.dtype=bfloat16", "algorithm.group_size=4"])
    dev = "cuda" if device == "cuda" else "cpu"
    master, tok = build_model(cfg.model, dtype="float32", device=dev, seed=cfg.run.seed)
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tok)
    seqs, _ = warmstart_sequences(cfg.warmstart, cfg.data, cfg.generation, prompts, tok)
    warmstart_steps(master, cfg.warmstart, cfg.run.seed, seqs, tok.pad_id, log=lambda m: None,
                    adam=learner_config(cfg))  # peaked distributions, as RL starts from
    generator = copy.deepcopy(master).to(torch.bfloat16).requires_grad_(False).eval()
    chunks = ChunkGenerator(chunk_config(cfg), generator, tok, PromptSet(prompts.examples, prompts.prompt_ids), 0, 1)
    rollout = chunks.generate(chunk=0, policy_version=0).to("cpu")  # μ: what the bf16 engine sampled with
    apply_autocast(master, torch.bfloat16, dev)  # π: the 1-GPU trainer's compute (fp32 master, bf16 ops)
    learner = Learner(master, learner_config(cfg))
    tokens, behavior, mask = (t.to(dev) for t in completion_targets(rollout))
    with torch.no_grad():
        logp, _, _ = master(tokens, head=learner._head(tokens[:, 1:]))
    log_ratio = (logp.float() - behavior)[mask]  # [n] log π/μ over every completion token
    metrics = importance_metrics(torch.exp(logp.float() - behavior), mask.float(),
                                 cfg.algorithm.rho, cfg.algorithm.clip_eps)
    out = {"dtype": "bfloat16", "tokens": int(mask.sum()), "mean_abs_log_ratio": float(log_ratio.abs().mean()),
           "max_abs_log_ratio": float(log_ratio.abs().max()), "mismatch_kl": metrics["mismatch_kl"],
           "is_ratio_max": metrics["is_ratio_max"], "ess": metrics["ess"]}
    return judge(out, {"mean_abs_log_ratio": (out["mean_abs_log_ratio"], "<=", 0.05),
                       "abs_mismatch_kl": (abs(out["mismatch_kl"]), "<=", 0.01), "ess": (out["ess"], ">=", 0.9)})


def train(device: str, size: dict) -> dict:
    from llamarl_core.plan.plan import make_plan
    from llamarl_core.runtime.controller import Controller
    from llamarl_core.runtime.devices import check_host

    run_dir = os.path.join(os.environ.get("GPU_CHECK_TMP", "/tmp"), "train-run")
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)  # as `llamarl train` does (runtime/run_dir.py)
    cfg = _config(device, size["train_overrides"] + [f"run.dir={run_dir}", "run.weight_checksums=true"])
    plan = make_plan(cfg, run_dir=run_dir)
    check_host(plan, cfg.recipe)
    result = Controller(cfg, plan, run_dir).run()
    if not result.ok:
        raise RuntimeError(f"{result.message} {result.log_tail[-1500:]}")
    lines = [json.loads(x) for x in Path(run_dir, "weight_checksums.jsonl").read_text().splitlines()]
    sent = {x["version"]: x["sha256"] for x in lines if x["role"] == "trainer"}
    held = [x for x in lines if x["role"] == "generator"]
    summary = json.loads(Path(run_dir, "summary.json").read_text())
    before, after = summary["accuracy_before"], summary["accuracy_after"]
    out = {"recipe": cfg.recipe, "steps": summary["steps"], "rl_wall_s": summary["rl_wall_s"],
           "accuracy_before": before, "accuracy_after": after,
           "accuracy_rise": None if before is None or after is None else round(after - before, 4),
           "versions_synced": len(sent),
           "checksums_equal": bool(held) and all(sent.get(x["version"]) == x["sha256"] for x in held)}
    checks = {"steps": (out["steps"], "==", cfg.run.max_steps), "checksums_equal": (out["checksums_equal"], "==", True)}
    if device == "cuda":  # at CPU sizes (2 RL steps) accuracy is recorded, not judged
        checks["accuracy_rise"] = (out["accuracy_rise"], ">", 0.0)
    return judge(out, checks)
