"""Greedy held-out accuracy during training, through the same code as `llamarl eval`.

The engine and batching match `llamarl eval`'s (`eval/parallel.py`): batches of
`resources.generator.max_batch_size` examples in data order, so evaluating the saved
checkpoint reproduces the accuracy training logged for it.
"""
from __future__ import annotations

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.generation import GenerationEngine


def heldout_summary(model, tokenizer, cfg: LlamaRLConfig, examples, reward_fn) -> dict:
    from llamarl_core.eval import evaluate
    gen, batch = cfg.generation, cfg.resources.generator.max_batch_size
    engine = GenerationEngine(model, tokenizer, max_batch_size=batch)
    result = evaluate(engine, tokenizer, examples, reward_fn, template=cfg.data.template, n_samples=1,
                      temperature=0.0, max_new_tokens=gen.max_new_tokens,
                      stop_strings=tuple(gen.stop_strings), seed=cfg.run.seed, batch_size=batch)
    return result.summary
