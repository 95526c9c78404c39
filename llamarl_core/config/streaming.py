"""Whether generator replicas stream prompts across steps (`generation.streaming`).

Streaming (executors/stream.py) needs separate generator replicas (async, k >= 1): sync mode
(k = 0) keeps its colocated chunked step, the paper's baseline. Under generator TP the
followers replay the leader's stream, which broadcasts each start-or-not decision
(executors/generator.py). `llamarl plan` shows the outcome per generator role.
"""
from __future__ import annotations


def streaming_active(cfg) -> bool:
    return bool(cfg.generation.streaming) and cfg.algorithm.max_offpolicy_steps >= 1
