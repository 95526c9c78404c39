"""Writes my_task.jsonl: add two 2-digit numbers, showing the work.

    python examples/my_task/make_data.py      # rewrites the committed file byte for byte

A row: {"input": "27+48", "target": "75", "solution": "7+8=15\\n2+4+1=7\\n75"}. `target` is what
my_reward.py wants alone on the last line; `solution` is the worked answer the warm start
teaches (a generic row's own `solution` field, docs/DATA.md): the units column, the tens column
with its carry, then the sum alone on the last line. Deterministic (a fixed seed, no
dependencies): the committed file is what this writes. Its last rows are the held-out set
(data.num_eval_examples unset: min(200, a fifth of the rows), docs/DATA.md).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

NUM_ROWS = 4000
SEED = 0


def solution(a: int, b: int) -> str:
    """The column work of a + b (both 2-digit), then the sum alone on the last line."""
    (a_tens, a_units), (b_tens, b_units) = divmod(a, 10), divmod(b, 10)
    units = a_units + b_units
    carry = units // 10
    tens = f"{a_tens}+{b_tens}{'+1' if carry else ''}={a_tens + b_tens + carry}"
    return f"{a_units}+{b_units}={units}\n{tens}\n{a + b}"


def rows(num_rows: int = NUM_ROWS, seed: int = SEED) -> list[dict]:
    problems = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(seed).shuffle(problems)
    return [{"input": f"{a}+{b}", "target": str(a + b), "solution": solution(a, b)} for a, b in problems[:num_rows]]


def main() -> None:
    path = Path(__file__).with_name("my_task.jsonl")
    path.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    print(f"wrote {NUM_ROWS} rows to {path}")


if __name__ == "__main__":
    main()
