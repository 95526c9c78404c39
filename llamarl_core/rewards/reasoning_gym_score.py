"""The `reasoning_gym` reward: a reasoning-gym task's own scorer, run only in reward workers.

`score(completion, example)` takes the answer between the completion's last
`<answer>...</answer>` tags (reasoning-gym's `extract_answer`; none: 0.0) and returns the
task's `score_answer(answer, entry)`, a float in [0, 1] (many tasks give partial credit, e.g.
`len(reference) / len(answer)` when the answer contains the reference). Held-out accuracy counts
a score of 1.0 as correct (eval/metrics.py `is_correct`), the reward itself is the score.

Why a worker process, like a custom reward (`RewardSpec.function`): the scorers are third-party
code of over a hundred tasks, some slow (they may search or simulate), so they run where a
deadline can kill them. The entry travels as the row's fields (data/reasoning_gym_tasks.py):
question, answer and metadata, plain JSON values (a tuple in metadata may arrive as a list; the
tasks tested read them either way), and the task's scorer object is built once per (task, config)
in the worker.
"""
from __future__ import annotations

import json
from functools import lru_cache

MAX_COMPLETION_CHARS = 20_000  # the tag search is linear; a scorer's own work on the answer is not


@lru_cache(maxsize=16)
def _scorer(task: str, config_json: str):
    import reasoning_gym

    return reasoning_gym.create_dataset(task, size=1, seed=0, **json.loads(config_json))


def score(completion: str, example: dict) -> float:
    from reasoning_gym.utils import extract_answer

    answer = extract_answer(completion[-MAX_COMPLETION_CHARS:])
    if answer is None:
        return 0.0
    entry = {"question": example["question"], "answer": example["answer"], "metadata": example["metadata"]}
    dataset = _scorer(example["task"], json.dumps(example.get("task_config") or {}, sort_keys=True))
    return float(dataset.score_answer(answer, entry))
