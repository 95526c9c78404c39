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

from launch_guard import Launched, no_launch, train_refused  # noqa: F401  (no_launch: a fixture)

BASE = ["warmstart.steps=0", "data.num_eval_examples=2", "generation.max_prompt_tokens=128", "data.instruction=''",
        "algorithm.prompts_per_step=2", "algorithm.group_size=2"]


def _chat(i, last_role="user"):
    turns = [{"role": "user", "content": f"What is {i} plus one?"}]
    if last_role == "assistant":
        turns.append({"role": "assistant", "content": f"{i + 1}"})
    return {"messages": turns, "answer": str(i + 1)}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _refused(capsys, tmp_path, *overrides) -> str:
    return train_refused(capsys, tmp_path, BASE, *overrides)


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


HANGS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"  # 1e10 steps
RAISES = "{{ raise_exception('this template only works with tools') }}"
HF = ["data.name=gsm8k", "generation.max_prompt_tokens=64", "generation.max_new_tokens=16"]


def _gsm8k(tmp_path):
    return _jsonl(tmp_path / "g.jsonl", [{"question": f"What is {i}+1?", "answer": f"#### {i + 1}"} for i in range(4)])


def _children() -> list[int]:
    """Pids whose parent is this test process (a template child left running would be one)."""
    import os
    from pathlib import Path
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _checkpoint(tmp_path, chat_template):
    from hf_tiny import save_tiny
    return save_tiny("smollm2", tmp_path / "ckpt", chat_template=chat_template)


def test_a_chat_template_that_loops_for_ever_exits_2_naming_its_file_and_the_limit(no_launch, capsys, tmp_path):
    import time

    from llamarl_core.data.template_check import RENDER_LIMIT_S, template_file
    ckpt = _checkpoint(tmp_path, HANGS)
    before = set(_children())  # an xdist worker may hold children of earlier tests' files
    start = time.monotonic()
    err = _refused(capsys, tmp_path, *HF, f"data.path={_gsm8k(tmp_path)}", f"model.checkpoint={ckpt}")
    assert time.monotonic() - start < 90  # the child's start (transformers) + one 5 s render
    assert set(_children()) - before == set()  # the rendering child is gone
    assert (f"{template_file(ckpt)}: the chat template did not render one prompt within {RENDER_LIMIT_S} s "
            "(at ") in err and "a loop in the template?" in err


def test_a_chat_template_that_raises_is_one_line_naming_its_file_and_the_error(no_launch, capsys, tmp_path):
    from llamarl_core.data.template_check import template_file
    ckpt = _checkpoint(tmp_path, RAISES)
    err = _refused(capsys, tmp_path, *HF, f"data.path={_gsm8k(tmp_path)}", f"model.checkpoint={ckpt}")
    assert (f"{template_file(ckpt)}: the chat template failed: TemplateError: this template only works with "
            "tools (at ") in err


def test_a_truncated_tokenizer_json_is_one_line_naming_the_file(no_launch, capsys, tmp_path):
    ckpt = _checkpoint(tmp_path, None)
    tok = ckpt / "tokenizer.json"
    tok.write_text(tok.read_text()[:300])  # a copy cut short
    err = _refused(capsys, tmp_path, *HF, f"data.path={_gsm8k(tmp_path)}", f"model.checkpoint={ckpt}")
    assert f"model.checkpoint={ckpt}: {tok}: not valid JSON (" in err and "a truncated copy?" in err


def test_llamarl_data_renders_a_raising_chat_template_as_one_line_too(capsys, tmp_path):
    from llamarl_core.data.template_check import template_file
    ckpt = _checkpoint(tmp_path, RAISES)
    code = main(["data", *HF, "data.num_eval_examples=2", f"data.path={_gsm8k(tmp_path)}", f"model.checkpoint={ckpt}"])
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{template_file(ckpt)}: the chat template failed: TemplateError: this template only works with tools" in err
