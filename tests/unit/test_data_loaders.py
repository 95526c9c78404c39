"""JSONL loaders: each format, auto-detection, and errors that name the file and line."""
import json

import pytest

from llamarl_core.data import DataFormatError, Keys, load_examples, resolve_dataset


def _write(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_gsm8k_lines_give_the_number_after_hashes_as_reference(tmp_path):
    path = _write(tmp_path, [{"question": "2+2?", "answer": "2+2=<<2+2=4>>4\n#### 1,004"}])
    (example,) = load_examples(path, fmt="gsm8k")
    assert (example.prompt, example.reference, example.source) == ("2+2?", "1,004", "gsm8k")
    assert example.solution.endswith("#### 1,004")


def test_math_lines_use_the_answer_field_or_else_the_last_box(tmp_path):
    path = _write(tmp_path, [
        {"problem": "p1", "solution": "so \\boxed{3}", "answer": "3", "unique_id": "a/1"},
        {"problem": "p2", "solution": "x \\boxed{1} then \\boxed{\\frac{1}{2}}"},
    ])
    first, second = load_examples(path, fmt="math")
    assert (first.id, first.reference) == ("a/1", "3")
    assert second.reference == "\\frac{1}{2}"


def test_auto_detects_each_format_and_generic_accepts_numeric_answers(tmp_path):
    path = _write(tmp_path, [
        {"question": "q", "answer": "#### 5"},
        {"problem": "p", "solution": "\\boxed{2}", "answer": "2"},
        {"prompt": "say 7", "answer": 7},
        "",
    ])
    sources = [(ex.source, ex.reference) for ex in load_examples(path)]
    assert sources == [("gsm8k", "5"), ("math", "2"), ("generic", "7")]


def test_a_malformed_line_raises_an_error_naming_file_and_line(tmp_path):
    path = _write(tmp_path, [{"question": "q", "answer": "#### 5"}, "{not json", ])
    with pytest.raises(DataFormatError, match=r"data\.jsonl:2: not valid JSON"):
        load_examples(path)


def test_a_gsm8k_answer_without_hashes_is_an_error_naming_the_field(tmp_path):
    path = _write(tmp_path, [{"question": "q", "answer": "five"}])
    with pytest.raises(DataFormatError, match=r":1: field 'answer' has no '####"):
        load_examples(path, fmt="gsm8k")


def test_skip_mode_skips_malformed_lines_and_counts_them(tmp_path):
    path = _write(tmp_path, [
        {"prompt": "a", "answer": "1"}, "[1, 2]", {"prompt": "b"}, {"prompt": "c", "answer": "3"},
    ])
    examples = load_examples(path, on_error="skip")
    assert [ex.prompt for ex in examples] == ["a", "c"]
    assert (examples.report.num_loaded, examples.report.num_skipped) == (2, 2)
    assert [line for line, _ in examples.report.skipped] == [2, 3]


def test_gsm8k_without_a_path_explains_where_to_get_the_file_and_which_key_to_set():
    with pytest.raises(ValueError, match=r"grade-school-math.*data\.path="):
        resolve_dataset("gsm8k", None, "test")
    with pytest.raises(ValueError, match=r"prm800k.*data\.path="):
        resolve_dataset("math500", None, "test")


def test_resolve_dataset_reads_a_folder_split_or_a_jsonl_path(tmp_path):
    _write(tmp_path, [{"question": "q", "answer": "#### 5"}] * 3, name="test.jsonl")
    assert len(resolve_dataset("gsm8k", str(tmp_path), "test", num_examples=2)) == 2
    assert len(resolve_dataset(str(tmp_path / "test.jsonl"), None, "test")) == 3


ROWS = [{"input": "1+1", "target": "007", "topic": "add"}, {"input": "2+3", "target": "5", "topic": "add"}]


def _tables(tmp_path):
    """The same rows as .json, .parquet, .csv and a save_to_disk folder."""
    datasets = pytest.importorskip("datasets")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "rows.json").write_text(json.dumps(ROWS))
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "rows.parquet")
    (tmp_path / "rows.csv").write_text("input,target,topic\n" + "".join(
        f"{r['input']},{r['target']},{r['topic']}\n" for r in ROWS))
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    return [str(tmp_path / name) for name in ("rows.json", "rows.parquet", "rows.csv", "saved")]


def test_json_parquet_csv_and_saved_datasets_load_offline_with_every_field_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # nothing may be cached there
    keys = Keys(prompt="input", answer="target")
    for path in _tables(tmp_path):
        examples = resolve_dataset("generic", path, "train", keys=keys)
        assert [(e.prompt, e.reference) for e in examples] == [("1+1", "007"), ("2+3", "5")], path  # CSV: text
        assert examples[0].as_dict() == {"input": "1+1", "target": "007", "topic": "add",
                                         "id": examples[0].id, "prompt": "1+1", "reference": "007"}
        assert examples[1].where.endswith(":row 2")
    assert not (tmp_path / "hf_home").exists()


def test_a_saved_dataset_dict_gives_each_split_its_own_rows(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:1]),
                          "validation": datasets.Dataset.from_list(ROWS[1:])}).save_to_disk(str(tmp_path / "dd"))
    keys = Keys(prompt="input", answer="target")
    assert [e.prompt for e in resolve_dataset("generic", str(tmp_path / "dd"), "train", keys=keys)] == ["1+1"]
    assert [e.prompt for e in resolve_dataset("generic", str(tmp_path / "dd"), "test", keys=keys)] == ["2+3"]


def test_an_unreadable_table_names_the_file(tmp_path):
    pytest.importorskip("datasets")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DataFormatError, match=r"bad\.parquet: not a readable \.parquet"):
        load_examples(str(tmp_path / "bad.parquet"))


def test_mapped_keys_take_numbers_and_lists_as_reference_text_and_keep_the_raw_row(tmp_path):
    path = _write(tmp_path, [{"q": "x?", "a": 3}, {"q": "y?", "a": ["1", "one"]}, {"q": "z?", "a": None}])
    examples = load_examples(path, keys=Keys(prompt="q", answer="a"), on_error="skip")
    assert [e.reference for e in examples] == ["3", '["1", "one"]']
    assert examples[1].fields["a"] == ["1", "one"] and examples.report.skipped[0][0] == 3


def test_a_messages_field_is_the_chat_and_its_last_user_turn_the_prompt(tmp_path):
    from llamarl_core.data import PromptFormat, render_prompt
    from llamarl_core.models import ByteTokenizer

    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    path = _write(tmp_path, [{"chat": chat, "answer": "4"}, {"chat": [{"role": "user"}], "answer": "1"}])
    with pytest.raises(DataFormatError, match=r":2: field 'chat' must be a non-empty list"):
        load_examples(path, keys=Keys(messages="chat"))
    (example,) = load_examples(path, keys=Keys(messages="chat"), on_error="skip")
    assert example.prompt == "2+2?" and list(example.messages) == chat
    tok = ByteTokenizer()
    assert render_prompt(example, "chat", tok) == tok.apply_chat_template(chat)
    # data.instruction goes on the last user turn; the row's own system turn wins over data.system_prompt
    fmt = PromptFormat("chat", "Sys.", "Box it.")
    assert render_prompt(example, fmt, tok) == tok.apply_chat_template(
        [chat[0], {"role": "user", "content": "2+2?\nBox it."}])
    bare = load_examples(_write(tmp_path, [{"chat": chat[1:], "answer": "4"}], "bare.jsonl"), keys=Keys(messages="chat"))[0]
    assert render_prompt(bare, fmt, tok) == tok.apply_chat_template(
        [{"role": "system", "content": "Sys."}, {"role": "user", "content": "2+2?\nBox it."}])


def test_data_keys_and_rewards_are_checked_by_the_schema():
    from llamarl_core.config.errors import ConfigError
    from llamarl_core.config.schema import DataConfig

    for good in ("auto", "math", "mypkg.rewards:score", "path/to/my_reward.py:score"):
        DataConfig(reward=good)
    for bad in ("bleu", "mypkg.rewards", "dir/file.txt:score", "a b:score", "x.py:"):
        with pytest.raises(ConfigError, match="data.reward"):
            DataConfig(reward=bad)
    with pytest.raises(ConfigError, match="data.messages_key=chat .* needs data.template=chat"):
        DataConfig(messages_key="chat")
    with pytest.raises(ConfigError, match="data.name='arithh' is not one of"):
        DataConfig(name="arithh")


def test_generic_data_has_no_built_in_verifier():
    from llamarl_core.data import NoVerifier, default_reward

    assert default_reward("generic", "gsm8k") == "gsm8k" and default_reward("math500") == "math"
    with pytest.raises(NoVerifier, match="data.reward"):
        default_reward("generic", "generic")
    with pytest.raises(NoVerifier):
        default_reward("path/to.jsonl", "generic")  # before: silently gsm8k's numeric rule
