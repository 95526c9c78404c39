"""The reward registry: each name maps to a bounded in-process part and an optional
isolated part that only ever runs in a killable worker process.

``prepare(completion, reference)`` returns either the final score (a float) or the small
argument tuple still to check in a worker with ``isolated(*args)``. A reward whose
``isolated`` is None (gsm8k, arith) is provably bounded and never needs a process.
A custom reward (``custom.py``: ``module:function``) is ``custom``: every item goes to a
worker, which imports the function; its second argument is the example dict, not the reference.
A built-in whose scorer is third-party code (``reasoning_gym``) is run the same way: ``custom``
with the ``function`` its workers import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llamarl_core.rewards.custom import is_custom
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
    custom: bool = False  # the user's function: imported and called only in a worker process
    function: str | None = None  # a built-in run as a custom one is: the module:function a worker imports


def _to_worker(completion: str, example) -> tuple:
    """A custom reward settles nothing here; a bare reference becomes {"reference": ...}."""
    return (completion, example if isinstance(example, dict) else {"reference": example})


def _only_in_a_worker(*args):
    raise RuntimeError("a custom reward runs only in a reward worker process (rewards/worker.py)")


_REGISTRY: dict[str, RewardSpec] = {
    "gsm8k": RewardSpec("gsm8k", gsm8k_reward),
    "arith": RewardSpec("arith", gsm8k_reward),  # the built-in task ends "#### N" too
    "math": RewardSpec("math", prepare_math, check_math_equivalence, warm_up_math),
    # Same rule, no text fast path: checks math-verify itself (scripts/verify_rewards_...).
    "math_symbolic": RewardSpec(
        "math_symbolic", prepare_math_symbolic, check_math_equivalence, warm_up_math
    ),
    # A reasoning-gym task's own scorer: third-party code, so only in a worker, given the row.
    "reasoning_gym": RewardSpec("reasoning_gym", _to_worker, _only_in_a_worker, custom=True,
                                function="llamarl_core.rewards.reasoning_gym_score:score"),
}


def reward_names() -> list[str]:
    return sorted(_REGISTRY)


def get_spec(name: str) -> RewardSpec:
    """The built-in spec, or for ``module:function`` one that imports nothing in this process."""
    if is_custom(name):
        return RewardSpec(name, _to_worker, _only_in_a_worker, custom=True)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown reward {name!r}; known rewards: {', '.join(reward_names())}"
        ) from None
