"""``resolve_dataset``: a config's (name, path, split) to examples. Nothing downloads.

Names: ``arith`` (built-in, needs no file), ``gsm8k`` and ``math500`` (need ``path``: a
file, or a folder holding ``<split>.jsonl``), ``generic`` (``path``: a .jsonl, .json,
.parquet or .csv file or a ``save_to_disk`` folder, fields named by ``Keys``), or a path to
a data file given as the name itself (``llamarl eval data=path/to.jsonl``; format
auto-detected).
"""
from __future__ import annotations

import os

from llamarl_core.config.choices import DATA_NAMES
from llamarl_core.data.arith import arith_examples
from llamarl_core.data.example import DataFormatError, Example
from llamarl_core.data.loaders import Keys, load_examples
from llamarl_core.data.tables import TABLE_SUFFIXES, is_table, saved_split

DEFAULT_ARITH_SIZES = {"train": 5000, "test": 200}
_WHERE_TO_GET = {
    "gsm8k": ("gsm8k", "the public repository openai/grade-school-math, file "
              "grade_school_math/data/test.jsonl (or train.jsonl)"),
    "math500": ("math", "the public repository openai/prm800k, file "
                "prm800k/math_splits/test.jsonl"),
}
DATA_SUFFIXES = (".jsonl", *TABLE_SUFFIXES)


_REWARD_BY_DATA = {"arith": "arith", "gsm8k": "gsm8k", "math500": "math", "reasoning_gym": "reasoning_gym"}
_REWARD_BY_SOURCE = {"arith": "arith", "gsm8k": "gsm8k", "math": "math"}


class NoVerifier(ValueError):
    """A data set with no built-in verifier and no `data.reward`."""


def default_reward(name: str, source: str | None = None) -> str:
    """The verifier a data set is scored with when the config says `data.reward=auto`: by
    name, else by the examples' family. Generic data has none (the numeric rule would score
    a reference `\\frac{1}{2}` as 1.0 for "the answer is 2"): `NoVerifier`."""
    found = _REWARD_BY_DATA.get(name) or _REWARD_BY_SOURCE.get(source or "")
    if found is None:
        what = f"data.name={name}" if name == "generic" else f"{name} (generic rows)"
        raise NoVerifier(f"{what} has no built-in verifier: set data.reward to gsm8k, math "
                         f"or arith, or to your own function (data.reward=path/to/file.py:function "
                         f"or package.module:function; docs/REWARDS.md)")
    return found


def resolve_dataset(
    name: str,
    path: str | None,
    split: str,
    num_examples: int | None = None,
    seed: int = 0,
    on_error: str = "raise",
    keys: Keys = Keys(),
    **difficulty,
) -> list[Example]:
    """Examples for ``split``; ``num_examples`` keeps the first N (arith: generates N). A file
    with no example left (empty, or every line skipped) raises ``DataFormatError``."""
    if name == "arith":
        count = DEFAULT_ARITH_SIZES.get(split, 200) if num_examples is None else num_examples
        return arith_examples(split, count, seed, **difficulty)
    if name == "reasoning_gym":  # needs data.task: a DataConfig's rows come from splits.load_split
        raise ValueError("data.name=reasoning_gym rows come from data.task: load them with load_split")
    if difficulty:
        raise ValueError(f"difficulty knobs {sorted(difficulty)} only apply to 'arith'")
    if name in _WHERE_TO_GET:
        fmt, where = _WHERE_TO_GET[name]
        if not path:
            raise ValueError(
                f"data set {name!r} needs a local file: get {where}, then set "
                f"data.path=/path/to/{split}.jsonl (nothing is downloaded)"
            )
        file_path = _split_file(path, split)
        examples = load_examples(file_path, fmt=fmt, on_error=on_error, keys=keys, split=split)
    elif name == "generic" or name.endswith(DATA_SUFFIXES):
        file_path = path or (name if name != "generic" else None)
        if not file_path:
            raise ValueError("data.name=generic needs data.path=FILE (.jsonl, .json, .parquet, .csv "
                             "or a datasets save_to_disk folder)")
        file_path = _split_file(file_path, split)
        examples = load_examples(file_path, fmt="auto", on_error=on_error, keys=keys, split=split)
    else:
        raise ValueError(
            f"unknown data set {name!r}: use {', '.join(map(repr, DATA_NAMES))} or a data file path"
        )
    if not examples:
        report = examples.report
        why = (f"all {report.num_skipped} non-blank lines were skipped (data.on_error=skip; first: "
               f"line {report.skipped[0][0]}: {report.skipped[0][1]})" if report.num_skipped
               else "the file holds no rows")
        raise DataFormatError(f"{file_path}: no examples: {why}")
    return examples if num_examples is None else examples[:num_examples]


def split_source(name: str, path: str | None, split: str) -> tuple[str | None, str | None]:
    """The rows ``resolve_dataset(name, path, split)`` reads, as (file, split inside it): equal
    for train and test when both are one file or one saved Dataset (not a folder of
    ``<split>.jsonl`` files nor a DatasetDict with both splits)."""
    file_path = path or (name if name.endswith(DATA_SUFFIXES) else None)
    if file_path is None:
        return None, split
    file_path = _split_file(file_path, split)
    return file_path, saved_split(file_path, split) if os.path.isdir(file_path) else None


def _split_file(path: str, split: str) -> str:
    """A folder of ``<split>.jsonl`` files gives that split's file; anything else is itself."""
    if os.path.isdir(path) and not is_table(path):
        return os.path.join(path, f"{split}.jsonl")
    return path
