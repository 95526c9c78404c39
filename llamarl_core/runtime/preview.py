"""`preview_data`: what the model will see, before a long run (`llamarl data`).

The roles' own path with no model and no process group: the train split as every role loads
it (`load_split`), the tokenizer the roles load (the checkpoint's, else the byte tokenizer),
each prompt rendered and encoded as `encode_prompts` does, and the configured verifier in a
`RewardPool`, as the reward role runs it, scoring each example's reference solution (the
warm-start target, `render_target`). A reference that scores below 1.0 is one the verifier
cannot read: RL on it would reward noise.

With an environment (`env.entry`/`env.tools`) each shown example also holds its episode's
opening as the model sees it (`opening`, `opening_ids`, from `reset` in the environment's own
workers: runtime/env_preview.py), and the summary the tools and the loss-mask legend.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.data import PromptFormat, prompt_format, render_prompt, render_target, resolve_template
from llamarl_core.executors.setup import load_split
from llamarl_core.rewards import RewardPool
from llamarl_core.runtime.data_check import check_chat_template, checked_reward, run_tokenizer


@dataclass
class DataPreview:
    fmt: PromptFormat        # template resolved against the tokenizer
    rows: list[dict]         # the first n examples: prompt, prompt_ids, reference, reference_reward
                             # (+ messages, opening, opening_ids or error, with an environment)
    summary: dict            # over the whole train split


def preview_data(cfg: LlamaRLConfig, n: int = 3) -> DataPreview:
    """Render, tokenize and verify the train split; bad input raises ConfigError."""
    try:
        examples = load_split(cfg.data, "train")
    except (ValueError, FileNotFoundError) as e:  # DataFormatError is a ValueError
        raise ConfigError(f"data: {e}") from None
    if not examples:
        raise ConfigError(f"data.name={cfg.data.name!r}: the train split has no examples")
    tokenizer = run_tokenizer(cfg)
    check_chat_template(cfg, tokenizer, examples)
    fmt = prompt_format(cfg.data)
    fmt = replace(fmt, template=resolve_template(fmt.template, tokenizer))
    texts = [render_prompt(ex, fmt, tokenizer) for ex in examples]
    ids = [tokenizer.encode(t) for t in texts]  # = encode_prompt, as training encodes them
    lengths = [len(i) for i in ids]
    reward = checked_reward(cfg)
    r = cfg.resources.reward
    with RewardPool(reward, num_workers=r.workers, timeout_s=r.timeout_s) as pool:
        refs = [ex.as_dict() if pool.spec.custom else ex.reference for ex in examples]  # a custom reward: the row
        rewards = pool.score([render_target(ex) for ex in examples], refs)
        stats = dict(pool.stats)
    rows = [{"prompt": texts[i], "prompt_ids": ids[i],
             "reference": examples[i].reference, "reference_reward": rewards[i]}
            for i in range(min(n, len(examples)))]
    limit = cfg.generation.max_prompt_tokens
    env = {}
    if cfg.env.enabled:  # the openings the environment's reset gives, in its own workers
        from llamarl_core.runtime.env_preview import MASK_LEGEND, preview_openings
        openings, facts = preview_openings(cfg.env, tokenizer, fmt, examples[:n])
        for row, opening in zip(rows, openings):
            row.update(opening)
        env = {"env": cfg.env.entry or "built-in tool env", "env_tools": facts["tools"],
               "env_tools_in": facts["tools_in"], "mask_legend": MASK_LEGEND,
               "opening_tokens_max": max((len(o["opening_ids"]) for o in openings if "opening_ids" in o), default=0)}
    summary = {
        "data": cfg.data.name, "path": cfg.data.path, "split": "train", "num_examples": len(examples),
        "template": fmt.template, "system_prompt": fmt.system_prompt, "instruction": fmt.instruction,
        "tokenizer": cfg.model.checkpoint or "byte", "reward": reward,
        "reference_reward_1_share": sum(x == 1.0 for x in rewards) / len(rewards),
        "reference_reward_mean": sum(rewards) / len(rewards),
        "reward_timeouts": stats["timeouts"], "reward_errors": stats["errors"],
        "prompt_tokens_min": min(lengths), "prompt_tokens_median": statistics.median(lengths),
        "prompt_tokens_max": max(lengths), "max_prompt_tokens": limit,
        "num_over_max_prompt_tokens": sum(length > limit for length in lengths), **env,
    }
    return DataPreview(fmt, rows, summary)

