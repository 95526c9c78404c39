"""Write the calculator task's rows (`recipes/data/calc_train.jsonl`, `calc_test.jsonl`) and its
tool-use demonstrations (`recipes/data/calc_demos.jsonl`) for `recipes/agent_calc_cpu.yaml`.

    python scripts/make_calc_data.py            # deterministic (seeds 0, 1, 2); the files are committed

A row asks for a 3-digit number times a 4-digit one ({"question": "What is 347 * 5821?",
"answer": "2019887"}): a 135M model cannot multiply those in its head, so the held-out accuracy
measures whether it calls `calc` (recipes/envs/calc_tools.py) and copies the result into
`\\boxed{}` (data.reward=arith reads the last box). Held-out pairs are never in the train split
nor in a demonstration.

A demonstration is the whole episode an agent should produce, as the warm start's chats
(`warmstart.data`): the opening exactly as an RL episode opens (the recipe's system prompt with
the hermes tools text appended, `envs/parsers.add_tools_prompt`, the question and the
instruction: `data/templates.prompt_messages`), the tool call, calc's answer as a `tool`
message, then the boxed answer. tests/unit/test_env_calc_agent.py checks that the warm start's
tokens of a demonstration are the tokens an RL episode of the same turns builds.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from llamarl_core.data.example import Example
from llamarl_core.data.templates import PromptFormat, prompt_messages
from llamarl_core.envs.parsers import add_tools_prompt
from llamarl_core.envs.tools import tool_schemas

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "recipes" / "data"
# Must equal recipes/agent_calc_cpu.yaml's data.system_prompt and data.instruction (tested).
SYSTEM_PROMPT = "Use the calc tool for arithmetic."
INSTRUCTION = "Put the final answer in \\boxed{}."
NUM_TRAIN, NUM_TEST, NUM_DEMOS = 2000, 150, 48


def question(a: int, b: int) -> str:
    return f"What is {a} * {b}?"


def pairs(n: int, rng: random.Random, exclude: set) -> list[tuple[int, int]]:
    """`n` distinct (3-digit, 4-digit) pairs not in `exclude`."""
    out: dict[tuple[int, int], None] = {}
    while len(out) < n:
        p = (rng.randint(100, 999), rng.randint(1000, 9999))
        if p not in exclude:
            out[p] = None
    return list(out)


def demo(a: int, b: int, schemas: list[dict]) -> dict:
    """The episode's chat: opening, tool call, tool result, boxed answer."""
    fmt = PromptFormat("chat", SYSTEM_PROMPT, INSTRUCTION)
    opening = prompt_messages(Example(id="demo", prompt=question(a, b), reference=str(a * b)), fmt)
    call = json.dumps({"name": "calc", "arguments": {"expression": f"{a} * {b}"}})
    return {"messages": add_tools_prompt(opening, schemas, "hermes") + [
        {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
        {"role": "tool", "content": str(a * b)},
        {"role": "assistant", "content": f"\\boxed{{{a * b}}}"}]}


def write(name: str, rows: list[dict]) -> None:
    (OUT / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    import sys
    sys.path.insert(0, str(ROOT))
    from recipes.envs.calc_tools import calc

    test = pairs(NUM_TEST, random.Random(1), set())
    train = pairs(NUM_TRAIN + NUM_DEMOS, random.Random(0), set(test))
    OUT.mkdir(parents=True, exist_ok=True)
    as_rows = lambda ps: [{"question": question(a, b), "answer": str(a * b)} for a, b in ps]  # noqa: E731
    write("calc_train", as_rows(train[:NUM_TRAIN]))
    write("calc_test", as_rows(test))
    schemas = tool_schemas([calc])
    write("calc_demos", [demo(a, b, schemas) for a, b in train[NUM_TRAIN:]])


if __name__ == "__main__":
    main()
