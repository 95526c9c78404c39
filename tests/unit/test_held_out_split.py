"""The held-out set is never trained on.

Without `data.eval_path`, one file holds both splits: its last `data.num_eval_examples` rows
are held out and training reads the rows before them. Before this, `load_split` gave
training every row of the file and the held-out eval the file's first rows, so every
held-out prompt was also a training prompt (the first test fails on that code).
"""
import json

import pytest

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.executors.setup import load_split


def _config(path, num_eval, eval_path=None, name="gsm8k", **keys) -> LlamaRLConfig:
    cfg = LlamaRLConfig()
    cfg.data.name, cfg.data.path, cfg.data.eval_path, cfg.data.num_eval_examples = name, str(path), eval_path, num_eval
    for key, value in keys.items():
        setattr(cfg.data, key, value)
    return cfg


def _rows(n, start=0):
    return [{"question": f"What is {i} plus one?", "answer": f"#### {i + 1}"} for i in range(start, start + n)]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_no_held_out_prompt_of_a_single_file_is_in_the_train_split(tmp_path):
    path = _jsonl(tmp_path / "all.jsonl", _rows(10))
    cfg = _config(path, num_eval=3)
    train, held_out = load_split(cfg, "train"), load_split(cfg, "test")
    assert not {e.prompt for e in held_out} & {e.prompt for e in train}
    # the tail is held out, the rows before it are trained on, and nothing is lost
    assert [e.prompt for e in held_out] == [f"What is {i} plus one?" for i in (7, 8, 9)]
    assert [e.prompt for e in train] == [f"What is {i} plus one?" for i in range(7)]
    assert [e.id for e in load_split(cfg, "train")] == [e.id for e in train]  # every role: the same slice


def test_an_eval_path_or_a_folder_of_splits_keeps_every_train_row(tmp_path):
    path = _jsonl(tmp_path / "train.jsonl", _rows(6))
    _jsonl(tmp_path / "test.jsonl", _rows(4, start=100))
    with_eval = _config(path, num_eval=2, eval_path=str(tmp_path / "test.jsonl"))
    assert len(load_split(with_eval, "train")) == 6
    assert [e.prompt for e in load_split(with_eval, "test")] == ["What is 100 plus one?", "What is 101 plus one?"]
    folder = _config(tmp_path, num_eval=2)  # a folder: train.jsonl and test.jsonl are apart already
    assert len(load_split(folder, "train")) == 6 and len(load_split(folder, "test")) == 2


def test_a_saved_dataset_dict_keeps_its_splits_and_a_single_saved_dataset_is_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows(5)),
                          "test": datasets.Dataset.from_list(_rows(3, start=50))}).save_to_disk(str(tmp_path / "dd"))
    cfg = _config(tmp_path / "dd", num_eval=2, name="generic", prompt_key="question", reward="gsm8k")
    assert len(load_split(cfg, "train")) == 5 and len(load_split(cfg, "test")) == 2
    datasets.Dataset.from_list(_rows(5)).save_to_disk(str(tmp_path / "one"))
    cfg = _config(tmp_path / "one", num_eval=2, name="generic", prompt_key="question", reward="gsm8k")
    train, held_out = load_split(cfg, "train"), load_split(cfg, "test")
    assert len(train) == 3 and not {e.prompt for e in held_out} & {e.prompt for e in train}


@pytest.mark.parametrize("num_eval", [0, 4, 200])
def test_a_held_out_tail_that_leaves_no_train_rows_is_refused_naming_the_keys(tmp_path, num_eval):
    path = _jsonl(tmp_path / "small.jsonl", _rows(4))
    with pytest.raises(ValueError, match=r"data.num_eval_examples=.*holds 4 row\(s\).*set data.eval_path"):
        load_split(_config(path, num_eval=num_eval), "train")
