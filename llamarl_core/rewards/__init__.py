"""Verifiable rewards: ``get_reward(name)(completion, reference) -> float`` and ``RewardPool``;
a custom ``module:function`` reward takes ``(completion, example_dict)`` and runs only in workers.

Every call returns a float whatever the completion holds: inputs are capped before any
search, answer extraction is linear, and symbolic checks (``math``) run in a killable
worker process with a wall-clock timeout. Rules and hardening: docs/REWARDS.md.
"""
from __future__ import annotations

import atexit
import threading
from typing import Callable

from llamarl_core.config.schema import RewardResources
from llamarl_core.rewards.pool import RewardPool
from llamarl_core.rewards.specs import RewardSpec, get_spec, reward_names

__all__ = ["RewardPool", "RewardSpec", "get_reward", "reward_names"]

_shared_pools: dict[str, RewardPool] = {}
_shared_lock = threading.Lock()


def _close_shared_pools() -> None:
    for pool in _shared_pools.values():
        pool.close()
    _shared_pools.clear()


atexit.register(_close_shared_pools)


def get_reward(name: str, timeout_s: float = RewardResources.timeout_s) -> Callable[[str, str], float]:
    """The scoring function for ``name`` (``gsm8k``, ``arith``, ``math``, ``module:function``).

    Bounded rewards return the plain in-process function. Rewards with a symbolic check
    return a function backed by one shared single-worker ``RewardPool`` per name, started
    here so its imports overlap the caller's work; calls are serialised by a lock.
    """
    spec = get_spec(name)
    if spec.isolated is None:
        return spec.prepare  # type: ignore[return-value]  # bounded: always a float
    with _shared_lock:
        if name not in _shared_pools:
            _shared_pools[name] = RewardPool(name, num_workers=1, timeout_s=timeout_s)

    def score_one(completion: str, reference: str) -> float:
        with _shared_lock:
            return _shared_pools[name].score([completion], [reference])[0]

    score_one.__name__ = f"{name}_reward"
    score_one.takes_example = spec.custom  # its second argument is the example dict
    return score_one
