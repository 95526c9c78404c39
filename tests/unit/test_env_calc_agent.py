"""The calculator agent's data and recipe (recipes/agent_calc_cpu.yaml, scripts/make_calc_data.py):
the committed files are what the script writes, the splits are disjoint and correct, and a
demonstration's warm-start tokens are the tokens an RL episode of the same turns builds, with
the same tokens trained (the model's turns) and masked (the opening, the tool's answer)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "recipes" / "data"
MODEL = ROOT / "models" / "smollm2-135m"
sys.path.insert(0, str(ROOT / "scripts"))
import make_calc_data  # noqa: E402


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]


def test_the_committed_files_are_what_the_script_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(make_calc_data, "OUT", tmp_path)
    make_calc_data.main()
    for name in ("calc_train", "calc_test", "calc_demos"):
        assert (tmp_path / f"{name}.jsonl").read_text() == (DATA / f"{name}.jsonl").read_text(), name


def test_rows_are_a_3_digit_times_a_4_digit_number_and_held_out_pairs_are_never_trained():
    train, test, demos = _rows("calc_train"), _rows("calc_test"), _rows("calc_demos")
    assert (len(train), len(test), len(demos)) == (2000, 150, 48)
    seen = set()
    for row in train + test:
        a, b = map(int, re.fullmatch(r"What is (\d{3}) \* (\d{4})\?", row["question"]).groups())
        assert row["answer"] == str(a * b)
        seen.add(row["question"])
    assert len(seen) == len(train) + len(test)  # distinct, so no test question is in train
    demo_questions = {d["messages"][1]["content"].split("\n")[0] for d in demos}
    assert not demo_questions & {r["question"] for r in test}


def test_a_demonstration_calls_calc_and_boxes_what_calc_answered():
    from llamarl_core.envs.tool_env import ToolEnv
    from llamarl_core.rewards.numeric import gsm8k_reward
    from recipes.envs.calc_tools import calc

    messages = _rows("calc_demos")[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    env = ToolEnv([calc])
    said, reward, done, counts = env.step(messages[2]["content"])
    assert (said, reward, done, counts) == ([{"role": "tool", "name": "calc", "content": messages[3]["content"]}],
                                            None, False, {"tool_calls": 1, "tool_errors": 0})
    assert env.step(messages[4]["content"])[2] is True  # no call: the final answer
    a, b = map(int, re.findall(r"\d+", messages[1]["content"])[:2])
    assert gsm8k_reward(messages[4]["content"], str(a * b)) == 1.0


def test_the_recipe_asks_what_the_demonstrations_answer():
    recipe = yaml.safe_load((ROOT / "recipes" / "agent_calc_cpu.yaml").read_text())
    assert recipe["data"]["system_prompt"] == make_calc_data.SYSTEM_PROMPT
    assert recipe["data"]["instruction"] == make_calc_data.INSTRUCTION
    assert recipe["env"]["tools"] == "recipes/envs/calc_tools.py:calc"
    assert recipe["warmstart"]["data"] == "recipes/data/calc_demos.jsonl"


@pytest.mark.skipif(not (MODEL / "tokenizer.json").exists(), reason="models/smollm2-135m is absent")
def test_warm_start_tokens_of_a_demonstration_equal_the_rl_episode_of_its_turns():
    """RL: ChatDelta.opening(the row's opening) + turn 1 as sampled + after_turn(turn 1, [tool])
    + turn 2 as sampled. 'As sampled' = the content's tokens then <|im_end|>, the stop token the
    generator ends a turn on; the template's "\\n" after it is the environment's (masked)."""
    from llamarl_core.data.chat_sft import assistant_sequences
    from llamarl_core.data.example import Example
    from llamarl_core.data.templates import PromptFormat, prompt_messages
    from llamarl_core.envs.chat import ChatDelta
    from llamarl_core.envs.tools import tool_schemas
    from llamarl_core.models.tokenizer import load_tokenizer
    from recipes.envs.calc_tools import calc

    tok = load_tokenizer(MODEL)
    messages = _rows("calc_demos")[0]["messages"]
    fmt = PromptFormat("chat", make_calc_data.SYSTEM_PROMPT, make_calc_data.INSTRUCTION)
    [(sft_ids, sft_mask)] = assistant_sequences(messages, fmt, tok)

    question = messages[1]["content"].split("\n")[0]
    opening = prompt_messages(Example(id="x", prompt=question, reference=""), fmt)
    delta = ChatDelta(tok, tools=tool_schemas([calc]), tool_parser="hermes")
    assert delta.tools_in_system is not None  # SmolLM2's template ignores tools=: the system text has them
    im_end = tok.encode("<|im_end|>")
    assert delta.eot_ids == im_end and im_end[0] in tok.eos_ids
    turn1 = tok.encode(messages[2]["content"]) + im_end
    turn2 = tok.encode(messages[4]["content"]) + im_end
    env_ids = delta.after_turn(turn1, [{"role": "tool", "name": "calc", "content": messages[3]["content"]}])
    prompt = delta.opening(opening)
    rl_ids = prompt + turn1 + env_ids + turn2
    rl_mask = [0] * len(prompt) + [1] * len(turn1) + [0] * len(env_ids) + [1] * len(turn2)

    # the warm start's sequence is the template's render, through the last <|im_end|> (its "\n" untrained)
    assert sft_ids[:len(rl_ids)] == rl_ids and tok.decode(sft_ids[len(rl_ids):]) == "\n"
    assert sft_mask[:len(rl_mask)] == rl_mask and sft_mask[len(rl_mask):] == [0]
    assert env_ids == tok.encode(f"\n<|im_start|>tool\n{messages[3]['content']}<|im_end|>\n<|im_start|>assistant\n")


def test_the_agent_bench_curve_has_the_warm_start_eval_and_every_logged_eval(tmp_path):
    """Version 0 (after the warm start) is in summary.json and samples.jsonl only: metrics.jsonl
    has a line per RL step, with eval/* on the steps that evaluated."""
    from llamarl_core.bench.agent import curve

    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in [
        {"step": 1, "wall_s": 50.0, "reward/mean": 0.5},
        {"step": 2, "wall_s": 90.0, "eval/accuracy": 0.75, "eval/tool_calls_mean": 1.0, "eval/turns_mean": 2.0}]))
    (tmp_path / "summary.json").write_text(json.dumps({
        "accuracy_by_version": {"0": 0.5, "2": 0.75},
        "eval_episodes_by_version": {"0": {"eval/tool_calls_mean": 0.5, "eval/turns_mean": 1.5}}}))
    (tmp_path / "samples.jsonl").write_text(json.dumps({"policy_version": 0, "wall_s": 20.0}) + "\n")
    assert curve(tmp_path) == [
        {"step": 0, "seconds": 20.0, "accuracy": 0.5, "tool_calls_mean": 0.5, "turns_mean": 1.5},
        {"step": 2, "seconds": 90.0, "accuracy": 0.75, "tool_calls_mean": 1.0, "turns_mean": 2.0}]
