"""A user's one file trains on most of its rows when `data.num_eval_examples` is unset.

The rule (`data/splits.py: held_out_count`): without `data.eval_path` the file's last rows are
held out; unset, min(200, a fifth of the rows), at least one; set, exactly that many, and a value
that leaves no row to train on exits 2 naming the key. Before it, the default of 200 held out a
200-row file whole, so the README's "Bring your own task" exited 2 until the user found the key.
"""
import json

import pytest

from llamarl_cli.main import main
from llamarl_core.config.load import load_config
from llamarl_core.data.splits import held_out_count, load_split
from llamarl_core.runtime.data_check import check_data

from launch_guard import Launched, no_launch  # noqa: F401  (no_launch: a fixture)

# generic rows read by the built-in numeric reward: no custom reward process in these tests
KEYS = ["data.name=generic", "data.prompt_key=input", "data.answer_key=target", "data.reward=gsm8k",
        "data.instruction=''", "warmstart.steps=0", "generation.max_prompt_tokens=64"]


def _jsonl(tmp_path, num_rows):
    path = tmp_path / "my_task.jsonl"
    path.write_text("".join(json.dumps({"input": f"{i}+1", "target": str(i + 1)}) + "\n" for i in range(num_rows)))
    return path


def _data(tmp_path, num_rows, *overrides):
    return load_config("cpu_tiny", [*KEYS, f"data.path={_jsonl(tmp_path, num_rows)}", *overrides]).data


@pytest.mark.parametrize("num_rows, held_out", [
    (200, 40),     # a fifth of 200: the README's 200-row file keeps 160 rows to train on
    (1000, 200),   # a fifth is 200: the cap and the fifth agree
    (2000, 200),   # capped at 200: a large file keeps the old default
    (7, 1),        # a fifth of 7 is 1.4 → 1
    (4, 1),        # a fifth of 4 is 0.8, but at least one row is held out
    (2, 1),        # the smallest file that can be split
])
def test_an_unset_held_out_count_is_at_most_a_fifth_of_the_rows_and_at_most_200(num_rows, held_out):
    assert held_out_count(None, num_rows, "f.jsonl") == held_out


def test_a_200_row_file_trains_on_its_first_160_rows_and_holds_out_the_last_40(tmp_path):
    data = _data(tmp_path, 200)
    train, test = load_split(data, "train"), load_split(data, "test")
    assert [e.prompt for e in train] == [f"{i}+1" for i in range(160)]
    assert [e.prompt for e in test] == [f"{i}+1" for i in range(160, 200)]


def test_an_explicit_count_is_kept_even_above_a_fifth(tmp_path):
    data = _data(tmp_path, 200, "data.num_eval_examples=150")
    assert len(load_split(data, "test")) == 150 and len(load_split(data, "train")) == 50


def test_a_one_row_file_is_refused_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"my_task.jsonl holds 1 row\(s\).*at least 2"):
        load_split(_data(tmp_path, 1), "train")


def test_the_built_in_task_and_an_eval_file_still_hold_out_200_rows_by_default(tmp_path):
    assert len(load_split(load_config("cpu_tiny", []).data, "test")) == 200
    eval_path = _jsonl(tmp_path, 300).rename(tmp_path / "eval.jsonl")
    data = _data(tmp_path, 10, f"data.eval_path={eval_path}")
    assert len(load_split(data, "test")) == 200 and len(load_split(data, "train")) == 10


def test_the_pre_launch_print_says_how_many_rows_are_held_out_and_why(tmp_path):
    cfg = load_config("cpu_tiny", [*KEYS, f"data.path={_jsonl(tmp_path, 200)}"])
    lines = check_data(cfg)
    assert lines[-1] == (f"data: {cfg.data.path}: its last 40 rows are held out, the 160 before them train "
                         f"(data.num_eval_examples unset: min(200, a fifth of the rows); set it, or "
                         f"data.eval_path, to choose)")


@pytest.mark.parametrize("asked", [200, 250])
def test_an_explicit_count_that_leaves_no_train_row_exits_2_naming_the_key(no_launch, capsys, tmp_path, asked):
    path = _jsonl(tmp_path, 200)
    code = main(["train", f"run.dir={tmp_path / 'run'}", *KEYS, f"data.path={path}", f"data.num_eval_examples={asked}"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "run").exists()
    assert f"data.num_eval_examples={asked}: the held-out set is the last rows of {path}" in err
    assert "holds 200 row(s)" in err
