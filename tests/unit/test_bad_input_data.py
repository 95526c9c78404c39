"""Bad data and rewards are refused before launch: `llamarl train` (and `llamarl node` on node 0)
exits 2 naming the key, the file and the line, and starts nothing.

Each case runs the CLI in this process with the controller replaced by one that fails the test
if it is ever built: "no role was started" means no controller, no torchrun, no run directory.
Before these checks, each case below launched the roles (an empty file: ZeroDivisionError in
the generator, restarted 3 times; a non-UTF-8 byte: UnicodeDecodeError naming no file or line).
"""
import json

import pytest

from llamarl_cli.main import main

from launch_guard import Launched, no_launch  # noqa: F401  (no_launch: a fixture)

# data.instruction='': no gsm8k instruction line, so prompt lengths below are the question's alone
BASE = ["warmstart.steps=0", "data.num_eval_examples=2", "generation.max_prompt_tokens=64", "data.instruction=''",
        "algorithm.prompts_per_step=2", "algorithm.group_size=2"]


def train(capsys, tmp_path, *overrides):
    run_dir = tmp_path / "run"
    code = main(["train", f"run.dir={run_dir}", *BASE, *overrides])
    out, err = capsys.readouterr()
    assert not run_dir.exists(), "the run directory was created"
    return code, out, err


def write(tmp_path, name, lines) -> str:
    path = tmp_path / name
    data = b"".join((x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)).encode()) + b"\n"
                    for x in lines)
    path.write_bytes(data)
    return str(path)


GOOD = {"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}


def refused(capsys, tmp_path, *overrides) -> str:
    code, out, err = train(capsys, tmp_path, *overrides)
    assert code == 2, out + err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_an_empty_jsonl_is_refused_naming_the_file(no_launch, capsys, tmp_path):
    path = write(tmp_path, "empty.jsonl", [])
    err = refused(capsys, tmp_path, "data.name=gsm8k", f"data.path={path}")
    assert f"data.path: {path}: no examples: the file holds no rows" in err


def test_a_non_utf8_byte_is_refused_with_its_line_and_column(no_launch, capsys, tmp_path):
    path = write(tmp_path, "bytes.jsonl", [GOOD, GOOD, b'{"question": "caf\xe9?", "answer": "#### 1"}'])
    err = refused(capsys, tmp_path, "data.name=gsm8k", f"data.path={path}")
    assert f"data.path: {path}:3: not UTF-8 text (byte 0xe9 at column 18)" in err


def test_a_malformed_line_is_refused_at_its_true_line_and_column(no_launch, capsys, tmp_path):
    # A lone \r is JSON whitespace inside line 1, and line 2 is blank: the bad line is line 3
    # as an editor counts it (text-mode reading split line 1 in two at the \r).
    path = write(tmp_path, "bad.jsonl", ['{"question": "q?",\r "answer": "#### 1"}', "", '{"question": "q" "answer": 1}'])
    err = refused(capsys, tmp_path, "data.name=gsm8k", f"data.path={path}")
    assert f"data.path: {path}:3: not valid JSON (Expecting ',' delimiter at column 18)" in err
    assert "data.on_error=skip" in err


def test_lines_without_an_answer_are_refused_naming_the_field_and_the_keys_found(no_launch, capsys, tmp_path):
    path = write(tmp_path, "noanswer.jsonl", [GOOD, {"question": "q?", "solution": "#### 1"}])
    err = refused(capsys, tmp_path, "data.name=gsm8k", f"data.path={path}")
    assert (f"data.path: {path}:2: missing field 'answer' (data.answer_key); the row has keys "
            f"['question', 'solution']") in err


def test_prompts_over_max_prompt_tokens_are_counted_with_the_longest_named(no_launch, capsys, tmp_path):
    long = {"question": "x" * 40, "answer": "#### 1"}
    longer = {"question": "y" * 50, "answer": "#### 1"}
    path = write(tmp_path, "long.jsonl", [GOOD, long, longer, GOOD])
    err = refused(capsys, tmp_path, "data.name=gsm8k", f"data.path={path}", "generation.max_prompt_tokens=32")
    # "Question: " + 50 bytes + "\nAnswer:" = 68 byte tokens; 40 x's give 58; "What is 2+3?" 30.
    # data.num_eval_examples=2: the last two rows are held out, so training reads GOOD and long
    assert ("generation.max_prompt_tokens=32: 1 of 2 prompts are longer; the longest has 58 tokens "
            f"(example long-2, {path}:2)") in err and "train split, data.path=" in err


def test_a_misspelled_data_name_is_refused_by_the_schema(no_launch, capsys, tmp_path):
    err = refused(capsys, tmp_path, "data.name=arithh")
    assert "data.name='arithh' is not one of arith, gsm8k, math500, generic" in err


def test_skip_covers_bad_json_missing_fields_and_bytes_and_reports_the_count(no_launch, capsys, tmp_path):
    path = write(tmp_path, "mixed.jsonl", [GOOD, "{oops", {"question": "q"}, b'{"question": "\xff"}', GOOD, GOOD])
    with pytest.raises(Launched):
        main(["train", f"run.dir={tmp_path / 'run'}", *BASE, "data.name=gsm8k", f"data.path={path}",
              "data.on_error=skip"])
    out = capsys.readouterr().out
    assert (f"data: skipped 3 bad line(s) of {path} (data.on_error=skip; line 2: not valid JSON "
            f"(Expecting property name enclosed in double quotes at column 2); line 3: missing field "
            f"'answer'") in out and "line 4: not UTF-8 text (byte 0xff at column 15)" in out
    assert "data: 1 train / 2 held-out examples checked" in out  # 3 good rows, the last 2 held out


def test_a_file_whose_every_line_is_skipped_is_refused(no_launch, capsys, tmp_path):
    path = write(tmp_path, "allbad.jsonl", ["{oops", b"\xff"])
    err = refused(capsys, tmp_path, "data.name=gsm8k", f"data.path={path}", "data.on_error=skip")
    assert f"{path}: no examples: all 2 non-blank lines were skipped (data.on_error=skip; first: line 1:" in err


def test_keys_the_config_cannot_map_are_listed(no_launch, capsys, tmp_path):
    path = write(tmp_path, "io.jsonl", [{"input": "1+1", "target": "2"}])
    err = refused(capsys, tmp_path, "data.name=generic", f"data.path={path}", "data.reward=gsm8k")
    assert f"{path}:1: cannot tell the format from keys ['input', 'target']" in err and "data.prompt_key" in err
    err = refused(capsys, tmp_path, "data.name=generic", f"data.path={path}", "data.reward=gsm8k",
                  "data.prompt_key=input", "data.answer_key=answer")
    assert f"{path}:1: missing field 'answer' (data.answer_key); the row has keys ['input', 'target']" in err


def test_generic_data_without_a_reward_is_refused(no_launch, capsys, tmp_path):
    path = write(tmp_path, "io.jsonl", [{"input": "1+1", "target": "2"}])
    err = refused(capsys, tmp_path, "data.name=generic", f"data.path={path}", "data.prompt_key=input",
                  "data.answer_key=target")
    assert "data.name=generic has no built-in verifier: set data.reward" in err


@pytest.mark.parametrize("body,reason", [
    ("import no_such_module_xyz\n", "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("score = 3\n", "is a int, not a function"),
])
def test_a_reward_that_does_not_import_or_is_not_callable_is_refused(no_launch, capsys, tmp_path, body, reason):
    reward = tmp_path / "reward.py"
    reward.write_text(body)
    err = refused(capsys, tmp_path, f"data.reward={reward}:score")
    assert f"data.reward={reward}:score: " in err and reason in err


def test_node_0_checks_the_data_before_it_starts_the_controller(no_launch, capsys, tmp_path):
    path = write(tmp_path, "bad.jsonl", [GOOD, "{oops"])
    run_dir = tmp_path / "planned"
    assert main(["plan", "recipe=cpu_2node", "--out", str(run_dir), *BASE, "data.name=gsm8k",
                 f"data.path={path}"]) == 0
    capsys.readouterr()
    assert main(["node", f"plan={run_dir / 'plan.json'}", "node_rank=0"]) == 2
    err = capsys.readouterr().err
    assert f"data.path: {path}:2: not valid JSON" in err
    assert not (run_dir / "logs").exists() or not any((run_dir / "logs").iterdir())
