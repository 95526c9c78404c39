"""`llamarl data`: rendered prompts, token counts and reference rewards, with no model; and the
prompt defaults (`data.template=auto`, `data.instruction`) as `--cfg job` shows them."""
import json

import pytest

from llamarl_cli.main import main

GSM8K_ROWS = [
    {"question": "Tom has 2 apples and buys 3 more. How many now?", "answer": "2+3=5\n#### 5"},
    {"question": "A box holds 10 pens; 4 are used. How many left?", "answer": "10-4=6\n#### 6"},
    {"question": "How many legs do two cats have?", "answer": "2*4=8\n#### eight"},  # unreadable reference
]


def run(capsys, *argv):
    code = main(["data", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def json_lines(out: str):
    *rows, last = [json.loads(line) for line in out.splitlines()]
    return rows, last["summary"]


def test_builtin_task_prompts_are_byte_tokens_and_every_reference_scores_one(capsys):
    code, out, err = run(capsys, "n=2", "generation.max_prompt_tokens=10", "data.num_train_examples=300", "--json")
    assert code == 0, err
    rows, summary = json_lines(out)
    assert len(rows) == 2 and set(rows[0]) == {"prompt", "prompt_ids", "reference", "reference_reward"}
    a, b = rows[0]["prompt"][3:8].split("+")  # "Q: 23+45\nA:"
    assert rows[0]["prompt"] == f"Q: {a}+{b}\nA:" and rows[0]["reference"] == str(int(a) + int(b))
    assert rows[0]["prompt_ids"] == list(rows[0]["prompt"].encode())  # byte tokenizer, no BOS
    assert [r["reference_reward"] for r in rows] == [1.0, 1.0]
    # 3 bytes "Q: " + 5 for "ab+cd" + 3 for "\nA:" = 11 tokens, every prompt over a limit of 10
    assert (summary["prompt_tokens_min"], summary["prompt_tokens_median"], summary["prompt_tokens_max"]) == (11, 11, 11)
    assert summary["num_over_max_prompt_tokens"] == summary["num_examples"] == 300
    assert (summary["template"], summary["reward"], summary["reference_reward_1_share"]) == ("plain", "arith", 1.0)


def test_a_checkpoints_own_chat_template_system_prompt_and_instruction_make_the_prompt(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from tok_tiny import tiny_hf_tokenizer

    ckpt = tiny_hf_tokenizer(tmp_path / "tok")  # a tokenizer and no weights: no model is built
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in GSM8K_ROWS))
    code, out, err = run(capsys, f"model.checkpoint={ckpt}", "data.name=gsm8k", f"data.path={data}",
                         f"data.eval_path={data}", "data.system_prompt=Be brief.", "n=5", "--json")
    assert code == 0, err
    rows, summary = json_lines(out)
    reference = transformers.AutoTokenizer.from_pretrained(str(ckpt))
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": GSM8K_ROWS[0]["question"] +
                 "\nGive the final answer on its own line as '#### <number>'."}]
    assert rows[0]["prompt"] == reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rows[0]["prompt_ids"] == reference.apply_chat_template(messages, add_generation_prompt=True,
                                                                  return_dict=False)
    assert [r["reference_reward"] for r in rows] == [1.0, 1.0, 0.0]
    assert summary["reference_reward_1_share"] == pytest.approx(2 / 3)
    lengths = sorted(len(r["prompt_ids"]) for r in rows)
    assert (summary["prompt_tokens_min"], summary["prompt_tokens_median"], summary["prompt_tokens_max"]) == tuple(lengths)
    assert (summary["template"], summary["instruction"]) == ("chat", messages[1]["content"].split("\n")[1])


def test_the_table_shows_prompt_reference_and_summary(capsys):
    code, out, _ = run(capsys, "n=1", "data.instruction=Add them.", "data.num_train_examples=100")
    assert code == 0
    lines = [line.strip("│ ") for line in out.splitlines()]
    assert lines[1:4] == [lines[1], "Add them.", "A:"] and lines[1].startswith("Q: ")
    assert "references scoring 1.0" in out and "100.00%" in out


@pytest.mark.parametrize("argv, words", [
    (["n=x"], ["n='x'"]),
    (["data.name=gsm8k"], ["data.path=", "nothing is downloaded"]),
    (["data.name=gsm8k", "data.path=/nonexistent/train.jsonl"], ["not found"]),
    (["model.checkpoint=/nonexistent/ckpt"], ["model.checkpoint=/nonexistent/ckpt", "no tokenizer"]),
    (["data.template=jinja"], ["data.template"]),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err


def test_cfg_job_shows_the_prompt_defaults_resolved(tmp_path, capsys):
    pytest.importorskip("transformers")
    from tok_tiny import tiny_hf_tokenizer

    code, out, _ = run(capsys, "--cfg", "job")
    assert code == 0 and "template: plain" in out and "instruction: ''" in out
    ckpt = tiny_hf_tokenizer(tmp_path / "tok")
    code, out, _ = run(capsys, f"model.checkpoint={ckpt}", "data.name=math500", "--cfg", "job")
    assert code == 0 and "template: chat" in out and "instruction: Put the final answer in \\boxed{}." in out
    # `llamarl eval` resolves for its own data set, eval.data
    assert main(["eval", "data=gsm8k", "--cfg", "job"]) == 0
    assert "instruction: Give the final answer on its own line as '#### <number>'." in capsys.readouterr().out
