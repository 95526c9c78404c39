"""What an environment is: a plain Python class a user names by path (`env.entry=file.py:Class`).

    class GuessEnv:
        def reset(self, example: dict) -> list[dict]:          # the opening messages
            ...
        def step(self, assistant_text: str) -> tuple[list[dict], float | None, bool]:
            ...                                                 # (messages back, reward, done)

One object is made per episode (`Class()`, no arguments) in an environment worker process
(envs/worker.py), never in a role's own process. `reset` receives the data row as a dict
(`Example.as_dict()`: every field as loaded plus `id`, `prompt`, `reference`) and
`example["messages"]`, the opening llamarl would use itself (the system prompt, when set, and
the question with its instruction); return those or your own. `step` receives the assistant's
last turn as text (what the model wrote, its end-of-turn token dropped) and returns the
messages the environment says back (`user` or `tool` messages), an optional reward for this
step, and whether the episode is over. It may return a fourth item, a dict of counts for this
step (`tool_calls`, `tool_errors`), which the run's `env/*` metrics add up.

An episode's reward is the sum of the rewards its steps returned; an episode whose steps all
returned None is scored by the run's `data.reward` on its last assistant turn, like a
single-turn completion (the built-in tool environment, envs/tool_env.py, works this way).
A single-turn task is the one-step case: no environment, the episode ends after one turn.
"""
from __future__ import annotations

import math
from typing import Optional, Protocol, runtime_checkable

STEP_COUNTS = ("tool_calls", "tool_errors")  # what a step may count in its fourth item


@runtime_checkable
class Environment(Protocol):
    def reset(self, example: dict) -> list[dict]: ...

    def step(self, assistant_text: str) -> tuple: ...


def check_messages(messages, where: str) -> list[dict]:
    """`messages` as a list of {"role": str, "content": str, ...} dicts, else ValueError naming `where`."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"{where} returned {type(messages).__name__}, not a list of messages")
    out = []
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content", ""), str):
            raise ValueError(f"{where}: message {k} must be a dict with a str 'role' and 'content', got {m!r:.200}")
        out.append(dict(m))
    return out


def check_step(result, where: str = "step") -> tuple[list[dict], Optional[float], bool, dict]:
    """A step's return value as (messages, reward or None, done, counts), else ValueError."""
    if not isinstance(result, tuple) or len(result) not in (3, 4):
        raise ValueError(f"{where} must return (messages, reward, done) or (messages, reward, done, counts), "
                         f"got {result!r:.200}")
    messages, reward, done = result[:3]
    counts = result[3] if len(result) == 4 else {}
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise ValueError(f"{where} returned reward {reward!r:.80}: a number or None")
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"{where} returned reward {reward}: a finite number or None")
    if not isinstance(counts, dict):
        raise ValueError(f"{where}'s fourth item must be a dict of counts, got {type(counts).__name__}")
    counts = {k: int(counts.get(k, 0)) for k in STEP_COUNTS}
    return check_messages(messages, where), reward, bool(done), counts
