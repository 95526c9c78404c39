"""A multi-turn game to copy: guess the secret number (`env.entry=recipes/envs/guess_env.py:GuessEnv`).

An environment is a plain class (no llamarl import): llamarl makes one object per episode in an
environment worker, calls `reset(example)` once for the opening messages, then `step(text)` after
each assistant turn until `done` or `env.max_turns` (docs/ENVIRONMENTS.md, llamarl_core/envs/protocol.py).

The data row holds the prompt, which explains the game, and the secret number as its answer:

    {"prompt": "I am thinking of an integer from 1 to 100. Guess it; I will say higher or lower.
                  End each turn with your guess.", "answer": "37"}

Rewards. An episode's reward is the sum of its steps' rewards, so each wrong guess returns 0.0
and the right one 1.0: every step returns a number, and an episode cut off by `env.max_turns`
(it never guessed right, or it gave up) adds up to 0.0 without a final step. Returning None on
wrong guesses would instead hand a never-solved episode to `data.reward`, which would score its
last turn against the secret number as a single-turn answer; a game should not want that. To
prefer fast solutions, lower the final reward per turn taken (e.g. `1.0 - 0.1 * (turns - 1)`).
"""
from __future__ import annotations

import re

_NUMBER = re.compile(r"(?:(?<![\w.])-)?\d+(?:\.\d+)?")  # a minus sign only where it cannot be "1-100"'s dash


def last_integer(text: str):
    """The last number written in `text` when it is whole (`42`, `1,000`, `-3`, `7.0`), else None."""
    found = _NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text))
    if not found or float(found[-1]) != int(float(found[-1])):
        return None
    return int(float(found[-1]))


class GuessEnv:
    """Higher/lower feedback as `user` messages; reward 1.0 and done on the secret, 0.0 per other turn."""

    def reset(self, example: dict) -> list[dict]:
        self.secret = int(str(example["reference"]).strip())
        self.turns = 0  # assistant turns so far (for a reward that prefers fast solutions)
        return example["messages"]

    def step(self, assistant_text: str) -> tuple[list[dict], float, bool]:
        self.turns += 1
        guess = last_integer(assistant_text)
        if guess is None:
            hint = "I found no whole number in your reply. End it with your guess, e.g. 'My guess is 50.'"
            return [{"role": "user", "content": hint}], 0.0, False
        if guess == self.secret:
            return [{"role": "user", "content": f"Correct, it is {guess}."}], 1.0, True
        hint = "higher" if guess < self.secret else "lower"
        return [{"role": "user", "content": f"{guess} is wrong: the number is {hint}. Guess again."}], 0.0, False
