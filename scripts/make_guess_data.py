"""Write the guessing game's rows (`recipes/data/guess_train.jsonl`, `guess_test.jsonl`): the
question explains the game, the answer is the secret (recipes/envs/guess_env.py reads it).

    python scripts/make_guess_data.py            # deterministic (seed 0); the files are committed

Secrets are 1..100; the test split's secrets are the multiples of 10 plus 5 (5, 15, ..., 95),
the train split's all others, so held-out games are ones never trained on.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "recipes" / "data"
QUESTION = ("I am thinking of an integer from 1 to 100. Guess it: answer with one number. "
            "After each guess I say higher or lower.")


def rows(secrets: list[int], n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt": QUESTION, "answer": str(rng.choice(secrets))} for _ in range(n)]


def main() -> None:
    test = [s for s in range(1, 101) if s % 10 == 5]
    train = [s for s in range(1, 101) if s not in test]
    OUT.mkdir(parents=True, exist_ok=True)
    for name, secrets, n, seed in (("guess_train", train, 1000, 0), ("guess_test", test, 50, 1)):
        (OUT / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(secrets, n, seed)))


if __name__ == "__main__":
    main()
