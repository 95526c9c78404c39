"""Probe: how far synchronous on-policy RL moves held-out accuracy per step at a given
learning rate / batch shape, in one process (no roles, no weight sync), from the cpu_tiny warm
start. A quick signal for choosing RL hyperparameters, not a benchmark of the runtime.

    python scripts/rl_lr_probe.py STEPS [key=value ...]  >> benchmarks/results/rl_lr_probe_cpu.jsonl
    python scripts/rl_lr_probe.py 24 algorithm.prompts_per_step=16 algorithm.lr=2e-4

Prints one JSON line: the overrides, held-out greedy accuracy at the start and after every
quarter of the steps, generation and training seconds. The warm start is made once (the
recipe's, by `executors/warmstart.py`) and cached in $LLAMARL_PROBE_WARMSTART (default
/tmp/llamarl_probe_warmstart).
"""
import json
import os
import sys
import time

import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.heldout import heldout_summary
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.setup import build_model, encode_prompts, load_split, reward_name
from llamarl_core.executors.warmstart import run_warmstart
from llamarl_core.rewards import get_reward


def main(argv) -> int:
    torch.set_num_threads(1)
    steps, overrides = int(argv[0]), argv[1:]
    ws = os.environ.get("LLAMARL_PROBE_WARMSTART", "/tmp/llamarl_probe_warmstart")
    if not os.path.exists(os.path.join(ws, "config.json")):
        run_warmstart(load_config("cpu_tiny"), ws, log=lambda m: None)
    cfg = load_config("cpu_tiny", [f"model.checkpoint={ws}", "warmstart.steps=0",
                                   "algorithm.max_offpolicy_steps=0", *overrides])
    model, tok = build_model(cfg, "float32")
    reward = get_reward(reward_name(cfg))
    prompts = encode_prompts(cfg, load_split(cfg, "train"), tok)
    held_out = load_split(cfg, "test")
    refs = [ex.reference for ex in prompts.examples]
    gen, learner = ChunkGenerator(cfg, model, tok, prompts, 0, 1), Learner(model, cfg)
    acc = [heldout_summary(model, tok, cfg, held_out, reward)["accuracy"]]
    gen_s = train_s = 0.0
    for step in range(steps):
        t0 = time.time()
        batch = gen.generate(step, step)
        batch.rewards = torch.tensor([
            float(reward(tok.decode(batch.tokens[r, int(batch.prompt_lens[r]):int(batch.prompt_lens[r])
                                                 + int(batch.completion_lens[r])].tolist()),
                         refs[int(batch.example_ids[r])])) for r in range(batch.num_rows)])
        t1 = time.time()
        learner.rl_step(batch, torch.zeros(batch.num_rows))
        gen_s, train_s = gen_s + t1 - t0, train_s + time.time() - t1
        if (step + 1) % max(1, steps // 4) == 0:
            acc.append(heldout_summary(model, tok, cfg, held_out, reward)["accuracy"])
    print(json.dumps({"overrides": overrides, "steps": steps, "accuracy": acc,
                      "generate_s": round(gen_s, 1), "train_s": round(train_s, 1),
                      "loadavg": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
