"""Greedy held-out accuracy during training, through the same code as `llamarl eval`.

The engine and batching match `llamarl eval`'s (`eval/parallel.py`): batches of
`resources.generator.max_batch_size` examples in data order, so evaluating the saved
checkpoint reproduces the accuracy training logged for it. A few (prompt, completion, reward)
rows of every eval go to `samples.jsonl` and the log, so a person sees what the model writes.
With an environment every example is a greedy episode (eval/episodes.py) through workers the
trainer keeps for its whole life (`heldout_episodes`); a sample row then also holds the episode.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from llamarl_core.config.layout import row_tokens
from llamarl_core.config.schema import DataConfig, EnvConfig, GenerationConfig
from llamarl_core.data import prompt_format
from llamarl_core.eval.episodes import EvalEpisodes
from llamarl_core.generation import GenerationEngine


@dataclass(frozen=True)
class HeldoutConfig:
    """What the held-out eval reads of the run (built by executors/pipeline.py: `heldout_config`)."""

    generation: GenerationConfig  # max_new_tokens, stop strings (decoding is greedy)
    data: DataConfig              # the prompt format
    max_batch_size: int           # resources.generator.max_batch_size, as `llamarl eval` batches
    seed: int                     # run.seed
    samples_per_eval: int         # logging.samples_per_eval
    env: EnvConfig = field(default_factory=EnvConfig)  # episodes, when env.enabled (eval/episodes.py)


def heldout_episodes(cfg: HeldoutConfig, tokenizer) -> Optional[EvalEpisodes]:
    """The environment's workers for every held-out eval of a run (None without one): the
    trainer opens them once and closes them at exit (`EvalEpisodes.close`)."""
    if not cfg.env.enabled:
        return None
    return EvalEpisodes(cfg.env, tokenizer, prompt_format(cfg.data), cfg.generation.max_prompt_tokens)


def heldout_eval(model, tokenizer, cfg: HeldoutConfig, examples, reward_fn,
                 progress: Callable[[int, int], None] | None = None, engine=None,
                 episodes: Optional[EvalEpisodes] = None) -> tuple[dict, list[dict]]:
    """(summary, the first `logging.samples_per_eval` predictions as sample rows). `engine`:
    anything with GenerationEngine's `generate` (default: one over `model`); `episodes`: from
    `heldout_episodes` (env.enabled; the engine then needs `stream`'s refill: not the sharded one)."""
    if cfg.env.enabled and episodes is None:
        raise ValueError("heldout_eval: env is enabled; pass episodes=heldout_episodes(cfg, tokenizer)")
    from llamarl_core.eval import evaluate
    gen, batch = cfg.generation, cfg.max_batch_size
    # episodes stream their turns into a KV cache sized for any row: the run's rows, not the
    # model's every position (SmolLM2: 8192 x max_batch_size)
    engine = engine or GenerationEngine(model, tokenizer, max_batch_size=batch,
                                        max_seq_len=row_tokens(gen, cfg.env) + 1 if cfg.env.enabled else None)
    if episodes is not None and not hasattr(engine, "stream"):
        raise ValueError(f"heldout_eval: episodes need an engine with stream(refill=...); "
                         f"{type(engine).__name__} (the FSDP2-sharded eval) has none")
    result = evaluate(engine, tokenizer, examples, reward_fn, template=prompt_format(cfg.data), n_samples=1,
                      temperature=0.0, max_new_tokens=gen.max_new_tokens,
                      stop_strings=tuple(gen.stop_strings), seed=cfg.seed, batch_size=batch,
                      progress=progress or False, episodes=episodes)
    samples = [{"id": p["id"], "prompt": p["prompt"], "completion": p["greedy_completion"],
                "reference": p["reference"], "reward": p["greedy_reward"],
                **({"episode": p["greedy_episode"], "turns": p["turns"][0]} if "greedy_episode" in p else {})}
               for p in result.predictions[:cfg.samples_per_eval]]
    return result.summary, samples


def heldout_summary(model, tokenizer, cfg: HeldoutConfig, examples, reward_fn) -> dict:
    return heldout_eval(model, tokenizer, cfg, examples, reward_fn)[0]


def write_samples(run_dir: str, step: int, version: int, wall_s: float, accuracy: float,
                  samples: list[dict]) -> None:
    """Append this eval's rows to samples.jsonl and print them (one line each, cut at 160 chars)."""
    with open(os.path.join(run_dir, "samples.jsonl"), "a") as f:
        for s in samples:
            f.write(json.dumps({"step": step, "policy_version": version, "wall_s": round(wall_s, 3),
                                "accuracy": accuracy, **s}) + "\n")
    for s in samples:
        text = f"  sample v{version} reward {s['reward']:.2f} | {s['prompt']!r} → {s['completion']!r}"
        print(text[:160], flush=True)
