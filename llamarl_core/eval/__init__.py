"""Evaluation shared by `llamarl eval` and the trainer: accuracy, pass@k, maj@k.

`evaluate` is rank-local (one engine, one shard of batches); `run_eval` (config → files)
adds data parallelism over generator replicas, `policy=reference`, and the run directory.
"""
from llamarl_core.eval.answers import answer_fn_for, boxed_answer, numeric_answer
from llamarl_core.eval.evaluate import (EvalResult, encode_prompt, evaluate, generate_predictions,
                                        merge_results, reference_predictions, score_predictions)
from llamarl_core.eval.metrics import CORRECT_REWARD, is_correct, maj_at_k, pass_at_k, summarize

__all__ = [
    "CORRECT_REWARD", "EvalResult", "answer_fn_for", "boxed_answer", "encode_prompt", "evaluate",
    "generate_predictions", "is_correct", "maj_at_k", "merge_results", "numeric_answer",
    "pass_at_k", "reference_predictions", "score_predictions", "summarize",
]
