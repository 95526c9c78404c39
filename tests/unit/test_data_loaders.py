"""JSONL loaders: each format, auto-detection, and errors that name the file and line."""
import json

import pytest

from llamarl_core.data import DataFormatError, load_examples, resolve_dataset


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
