"""The built-in task: GSM8K-style arithmetic with a short worked solution ending ``#### N``.

Why this default: the CPU recipe trains a ~2.5M-parameter byte-level Llama for about a
minute of supervised warm start and three minutes of RL on 2 cores. Fixed-width 2-digit
addition (``23+45``) was measured to reach ~37% greedy accuracy after ~185 supervised
steps and 65-83% after RL, while ``a+b-c`` learned too slowly; so the default is two
2-digit operands and ``+``. Bytes are tokens, so prompts and solutions stay short: prompt
``27+48``, worked solution (``solution_style``) ``7+8=15\\n2+4+1=7\\n#### 75`` (cpu_tiny's
``digit_sums``) or ``27+48=75\\n#### 75`` (``short``).

Train and test are disjoint for a given seed: every problem text is assigned to one split
by a seeded CRC32 hash (``TEST_SHARE`` of the space goes to test), and each split only
samples problems assigned to it. Sampling is deterministic by (seed, split).
"""
from __future__ import annotations

import random
import zlib

from llamarl_core.config.choices import SOLUTION_STYLES, SPLITS
from llamarl_core.config.schema import DataConfig
from llamarl_core.data.example import Example

TEST_SHARE_PER_MILLE = 100  # 10% of the problem space is reserved for the test split
MAX_DUPLICATE_STREAK = 2000  # repeated draws in a row: the split is used up, allow repeats
MAX_DRAWS_WITHOUT_HIT = 100_000  # draws before declaring a split empty


def arith_examples(
    split: str,
    num_examples: int,
    seed: int,
    *,
    digits: int = DataConfig.digits,
    num_operands: int = DataConfig.num_operands,
    ops: str = "+",
    solution_style: str = DataConfig.solution_style,
) -> list[Example]:
    """``num_examples`` problems of ``split`` ("train"/"test"); unique while the split's
    share of the problem space lasts, then repeating (so any size can be asked for).

    ``solution_style``: ``columns`` works a sum of non-negative operands digit by digit with
    carries and the answer written so far (``7+8=15 -> 5`` / ``2+4+1=7 -> 75`` / ``#### 75``),
    so each generated token depends on a one-digit fact or a copy from the line above, which a
    tiny model learns quickly; ``digit_sums`` is the same column sums without the running
    answer (``7+8=15`` / ``2+4+1=7`` / ``#### 75``): a third fewer tokens to generate and
    train on, and measured to learn faster per supervised step (docs/ALGORITHMS.md, "The
    default run"); ``short`` is ``27+48=75\n#### 75``.
    Subtraction always uses ``short``."""
    if solution_style not in SOLUTION_STYLES:
        raise ValueError(f"arith: solution_style must be one of {', '.join(SOLUTION_STYLES)}, "
                         f"got {solution_style!r}")
    _check(split, num_examples, digits, num_operands, ops)
    rng = random.Random(f"arith:{seed}:{split}")
    low, high = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    examples: list[Example] = []
    seen: set[str] = set()
    misses = duplicate_streak = 0
    exhausted = False
    while len(examples) < num_examples:
        operands = [rng.randint(low, high) for _ in range(num_operands)]
        operators = [rng.choice(ops) for _ in range(num_operands - 1)]
        text = _render(operands, operators)
        if _split_of(text, seed) != split:
            misses += 1
            if misses >= MAX_DRAWS_WITHOUT_HIT and not examples:
                raise ValueError(f"arith: no {split!r} problems exist for these knobs")
            continue
        if text in seen and not exhausted:
            duplicate_streak += 1
            exhausted = duplicate_streak >= MAX_DUPLICATE_STREAK
            continue
        duplicate_streak = 0
        seen.add(text)
        answer = str(_evaluate(operands, operators))
        examples.append(Example(
            id=f"arith-{split}-{seed}-{len(examples)}",
            prompt=text,
            reference=answer,
            solution=_solution(text, operands, operators, answer, solution_style),
            source="arith",
        ))
    return examples


def _solution(text: str, operands: list[int], operators: list[str], answer: str, style: str) -> str:
    if style == "short" or any(op != "+" for op in operators):
        return f"{text}={answer}\n#### {answer}"
    steps = column_steps(operands)
    if style == "digit_sums":
        return "\n".join(step.split(" -> ")[0] for step in steps) + f"\n#### {answer}"
    return "\n".join(steps) + f"\n#### {answer}"


def column_steps(operands: list[int]) -> list[str]:
    """Schoolbook addition, least significant column first: one line per column, each ending
    in the answer written so far (`-> ...`), so the final answer is always one line above."""
    width = max(len(str(v)) for v in operands)
    carry, written, lines = 0, "", []
    for col in range(width):
        column = [(v // 10**col) % 10 for v in operands if col < len(str(v))]
        terms = [str(d) for d in column] + ([str(carry)] if carry else [])
        total = sum(column) + carry
        written = (str(total) if col == width - 1 else str(total % 10)) + written
        lines.append("+".join(terms) + f"={total} -> {written}")
        carry = total // 10
    return lines


def _split_of(text: str, seed: int) -> str:
    bucket = zlib.crc32(f"{seed}:{text}".encode()) % 1000
    return "test" if bucket < TEST_SHARE_PER_MILLE else "train"


def _render(operands: list[int], operators: list[str]) -> str:
    parts = [str(operands[0])]
    for op, value in zip(operators, operands[1:]):
        parts += [op, str(value)]
    return "".join(parts)


def _evaluate(operands: list[int], operators: list[str]) -> int:
    """Usual precedence: fold ``*`` into terms first, then add/subtract left to right."""
    terms, signs = [operands[0]], [1]
    for op, value in zip(operators, operands[1:]):
        if op == "*":
            terms[-1] *= value
        else:
            terms.append(value)
            signs.append(1 if op == "+" else -1)
    return sum(sign * term for sign, term in zip(signs, terms))


def _check(split: str, num_examples: int, digits: int, num_operands: int, ops: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"arith split must be 'train' or 'test', got {split!r}")
    if num_examples < 0:
        raise ValueError(f"arith num_examples must be >= 0, got {num_examples}")
    if not 1 <= digits <= 9:
        raise ValueError(f"arith digits must be in 1..9, got {digits}")
    if num_operands < 2:
        raise ValueError(f"arith num_operands must be >= 2, got {num_operands}")
    if not ops or any(op not in "+-*" for op in ops):
        raise ValueError(f"arith ops must be a non-empty string of '+', '-', '*', got {ops!r}")
