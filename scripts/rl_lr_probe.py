"""Probe: how far synchronous on-policy RL moves held-out accuracy per step and per second of
compute at a given learning rate / batch shape / task format, in one process (no roles, no
weight sync), from the cpu_tiny warm start. A quick signal for choosing RL hyperparameters,
not a benchmark of the runtime.

    python scripts/rl_lr_probe.py STEPS [--eval-every N] [key=value ...]  >> benchmarks/results/rl_lr_probe_cpu.jsonl
    python scripts/rl_lr_probe.py 24 algorithm.prompts_per_step=16 algorithm.lr=2e-4
    python scripts/rl_lr_probe.py 0 warmstart.steps=200      # only make the warm start (cached)

Prints one JSON line: the overrides, held-out greedy accuracy at the start and after every
`--eval-every` steps (default: every quarter of the steps), the training reward mean per
eval interval, and the generation / training seconds spent up to each eval (so configs
with different step costs compare at equal compute). The warm start is made once per
resolved warm-start/data/model setting (the recipe's, by `sft/warmstart.py`) and cached under
$LLAMARL_PROBE_WARMSTART (default /tmp/llamarl_probe_warmstart).
"""
import hashlib
import json
import os
import sys
import time

import torch
from omegaconf import OmegaConf

from llamarl_core.bench.sync_vs_async import run_warmstart
from llamarl_core.config.load import load_config
from llamarl_core.eval.heldout import heldout_summary
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import chunk_config, heldout_config, learner_config
from llamarl_core.executors.setup import encode_prompts, load_split, reward_name
from llamarl_core.executors.train_step import train_on
from llamarl_core.models.build import build_model
from llamarl_core.rewards import get_reward

def _warm_start(overrides: list[str]) -> tuple[str, float]:
    """(checkpoint dir, seconds it took or 0 when cached) for these overrides' warm start. The
    cache key is the resolved warm-start, data and model settings, so a recipe edit is a miss."""
    cfg = load_config("cpu_tiny", overrides)
    key = hashlib.sha1(json.dumps([OmegaConf.to_container(OmegaConf.structured(x)) for x in
                                   (cfg.warmstart, cfg.data, cfg.model)] + [cfg.run.seed],
                                  sort_keys=True).encode()).hexdigest()[:10]
    ws = os.environ.get("LLAMARL_PROBE_WARMSTART", "/tmp/llamarl_probe_warmstart") + f"_{key}"
    if os.path.exists(os.path.join(ws, "config.json")):
        return ws, 0.0
    return ws, run_warmstart(cfg, ws, log=lambda m: None)["seconds"]


def main(argv) -> int:
    torch.set_num_threads(1)
    eval_every = 0
    if "--eval-every" in argv:
        i = argv.index("--eval-every")
        eval_every, argv = int(argv[i + 1]), argv[:i] + argv[i + 2:]
    betas = None  # --adam-betas B1,B2: a probe of the RL optimizer's betas (the Learner uses 0.9,0.95)
    if "--adam-betas" in argv:
        i = argv.index("--adam-betas")
        betas, argv = tuple(map(float, argv[i + 1].split(","))), argv[:i] + argv[i + 2:]
    steps, overrides = int(argv[0]), argv[1:]
    eval_every = eval_every or max(1, steps // 4)
    ws, ws_s = _warm_start(overrides)
    if steps == 0:  # only make (or find) the warm start: probes run side by side share it
        print(json.dumps({"warmstart": ws, "warmstart_s": round(ws_s, 1)}), file=sys.stderr)
        return 0
    rl_over = [o for o in overrides if not o.startswith(("warmstart.", "model."))]
    cfg = load_config("cpu_tiny", [*rl_over, f"model.checkpoint={ws}", "warmstart.steps=0",
                                   "algorithm.max_offpolicy_steps=0"])
    model, tok = build_model(cfg.model, "float32", seed=cfg.run.seed)
    reward = get_reward(reward_name(cfg.data))
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tok)
    held_out = load_split(cfg.data, "test")
    refs = [ex.reference for ex in prompts.examples]
    gen, learner = ChunkGenerator(chunk_config(cfg), model, tok, prompts, 0, 1), Learner(model, learner_config(cfg))
    if betas:
        for group in learner.optimizer.param_groups:
            group["betas"] = betas
    acc = [heldout_summary(model, tok, heldout_config(cfg), held_out, reward)["accuracy"]]
    gen_s = train_s = 0.0
    rewards, reward_means, seconds, tokens = [], [], [], 0
    for step in range(steps):
        t0 = time.time()
        batch = gen.generate(step, step)
        batch.rewards = torch.tensor([
            float(reward(tok.decode(batch.tokens[r, int(batch.prompt_lens[r]):int(batch.prompt_lens[r])
                                                 + int(batch.completion_lens[r])].tolist()),
                         refs[int(batch.example_ids[r])])) for r in range(batch.num_rows)])
        t1 = time.time()
        train_on(learner, batch, torch.zeros(batch.num_rows))
        gen_s, train_s = gen_s + t1 - t0, train_s + time.time() - t1
        rewards.append(float(batch.rewards.mean()))
        tokens += int(batch.completion_lens.sum())
        if (step + 1) % eval_every == 0:
            acc.append(heldout_summary(model, tok, heldout_config(cfg), held_out, reward)["accuracy"])
            reward_means.append(round(sum(rewards) / len(rewards), 4))
            seconds.append([round(gen_s, 1), round(train_s, 1)])
            rewards = []
    print(json.dumps({"overrides": overrides + ([f"adam_betas={betas[0]},{betas[1]}"] if betas else []), "steps": steps, "eval_every": eval_every,
                      "accuracy": acc, "reward_mean": reward_means,
                      "generate_train_s_at_eval": seconds, "generate_s": round(gen_s, 1),
                      "train_s": round(train_s, 1), "completion_tokens_mean": round(tokens / max(1, steps) / (
                          cfg.algorithm.prompts_per_step * cfg.algorithm.group_size), 1),
                      "warmstart_s": round(ws_s, 1), "loadavg": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
