"""Whether generator replicas stream prompts across steps (`generation.streaming`).

Streaming (executors/stream.py) needs separate generator replicas (async, k >= 1): sync mode
(k = 0) keeps its colocated chunked step, the paper's baseline. A tensor-parallel replica
(resources.generator.tp > 1) also keeps chunks: its followers replay the leader's steps chunk
by chunk (executors/replica.py) and have no way yet to replay refills between decode steps.
`llamarl plan` shows the outcome per generator role ("streaming": true/false).
"""
from __future__ import annotations


def streaming_active(cfg) -> bool:
    return (bool(cfg.generation.streaming) and cfg.algorithm.max_offpolicy_steps >= 1
            and cfg.resources.generator.tp == 1)
