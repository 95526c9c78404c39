"""A format reward to add beside a task's correctness reward (docs/REWARDS.md, "Several weighted
rewards"):

    llamarl train 'data.rewards=[{fn: arith, weight: 1.0},
                                 {fn: examples/format_reward.py:has_answer_line, weight: 0.2}]'

It pays for the answer line the verifier reads ("#### <number>"), right or wrong, so a model that
has not yet learned the format gets a signal before it gets answers right.
"""
import re

ANSWER_LINE = re.compile(r"^\s*####\s*-?[\d,]*\.?\d+\s*$", re.MULTILINE)


def has_answer_line(completion: str, example: dict) -> float:
    return 1.0 if ANSWER_LINE.search(completion) else 0.0
