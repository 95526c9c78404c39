"""Greedy held-out accuracy during training, through the same code as `llamarl eval`."""
from __future__ import annotations

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.generation import GenerationEngine


def heldout_summary(model, tokenizer, cfg: LlamaRLConfig, examples, reward_fn) -> dict:
    from llamarl_core.eval import evaluate
    gen = cfg.generation
    engine = GenerationEngine(model, tokenizer, max_batch_size=max(64, cfg.resources.generator.max_batch_size),
                              max_seq_len=gen.max_prompt_tokens + gen.max_new_tokens + 1)
    result = evaluate(engine, tokenizer, examples, reward_fn, template=cfg.data.template, n_samples=1,
                      temperature=0.0, max_new_tokens=gen.max_new_tokens,
                      stop_strings=tuple(gen.stop_strings), seed=cfg.run.seed)
    return result.summary
