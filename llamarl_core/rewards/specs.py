"""The reward registry: each name maps to a bounded in-process part and an optional
isolated part that only ever runs in a killable worker process.

``prepare(completion, reference)`` returns either the final score (a float) or the small
argument tuple still to check in a worker with ``isolated(*args)``. A reward whose
``isolated`` is None (gsm8k, arith) is provably bounded and never needs a process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llamarl_core.rewards.math_answer import (
    check_math_equivalence,
    prepare_math,
    prepare_math_symbolic,
    warm_up_math,
)
from llamarl_core.rewards.numeric import gsm8k_reward


@dataclass(frozen=True)
class RewardSpec:
    name: str
    prepare: Callable[[str, str], "float | tuple[str, str]"]
    isolated: Callable[[str, str], float] | None = None
    warm_up: Callable[[], None] | None = None


_REGISTRY: dict[str, RewardSpec] = {
    "gsm8k": RewardSpec("gsm8k", gsm8k_reward),
    "arith": RewardSpec("arith", gsm8k_reward),  # the built-in task ends "#### N" too
    "math": RewardSpec("math", prepare_math, check_math_equivalence, warm_up_math),
    # Same rule, no text fast path: checks math-verify itself (scripts/verify_rewards_...).
    "math_symbolic": RewardSpec(
        "math_symbolic", prepare_math_symbolic, check_math_equivalence, warm_up_math
    ),
}


def reward_names() -> list[str]:
    return sorted(_REGISTRY)


def get_spec(name: str) -> RewardSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown reward {name!r}; known rewards: {', '.join(reward_names())}"
        ) from None
