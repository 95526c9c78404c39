"""Trust the data (#44 cases 3 and 12, and a malformed tokenizer.json): a chat row that ends
with the assistant's answer, a chat template that hangs or raises, and a truncated
tokenizer.json are each refused before launch in one line naming the file, exit 2.

Before these checks a `messages` row ending with an assistant turn was rendered with the
answer in the prompt (the run learned to copy it), a template with a huge loop hung
`llamarl train` before launch, and a raising template or a truncated tokenizer.json printed
a traceback.
"""
import json

import pytest

from llamarl_cli.main import main

BASE = ["warmstart.steps=0", "data.num_eval_examples=2", "generation.max_prompt_tokens=128", "data.instruction=''",
        "algorithm.prompts_per_step=2", "algorithm.group_size=2"]


class Launched(Exception):
    pass


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise Launched("a controller was built: the run would have started its roles")
    monkeypatch.setattr("llamarl_cli.train_cmd.Controller", refuse)
    monkeypatch.setattr("llamarl_core.runtime.node.NodeController", refuse)


def _chat(i, last_role="user"):
    turns = [{"role": "user", "content": f"What is {i} plus one?"}]
    if last_role == "assistant":
        turns.append({"role": "assistant", "content": f"{i + 1}"})
    return {"messages": turns, "answer": str(i + 1)}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _refused(capsys, tmp_path, *overrides) -> str:
    run_dir = tmp_path / "run"
    code = main(["train", f"run.dir={run_dir}", *BASE, *overrides])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists(), "the run directory was created"
    return err


CHAT = ["data.name=generic", "data.template=chat", "data.messages_key=messages", "data.answer_key=answer", "data.reward=gsm8k"]


def test_a_chat_row_ending_with_the_assistants_answer_is_refused_naming_file_and_line(no_launch, capsys, tmp_path):
    path = _jsonl(tmp_path / "chat.jsonl", [_chat(0), _chat(1), _chat(2, "assistant"), _chat(3), _chat(4)])
    err = _refused(capsys, tmp_path, *CHAT, f"data.path={path}")
    assert f"{path}:3: field 'messages' ends with an assistant turn" in err


def test_with_on_error_skip_a_chat_row_ending_with_the_answer_is_skipped_and_counted(no_launch, capsys, tmp_path):
    path = _jsonl(tmp_path / "chat.jsonl", [_chat(0), _chat(1, "assistant"), _chat(2), _chat(3), _chat(4)])
    with pytest.raises(Launched):
        main(["train", f"run.dir={tmp_path / 'run'}", *BASE, *CHAT, f"data.path={path}", "data.on_error=skip"])
    out = capsys.readouterr().out
    assert f"data: skipped 1 bad line(s) of {path} (data.on_error=skip; line 2: field 'messages' ends with an " \
           "assistant turn" in out
    assert "data: 2 train / 2 held-out examples checked" in out  # 4 good rows, the last 2 held out
