"""``resolve_dataset``: a config's (name, path, split) to examples. Nothing downloads.

Names: ``arith`` (built-in, needs no file), ``gsm8k`` and ``math500`` (need ``path``: a
.jsonl file, or a folder holding ``<split>.jsonl``), or a path to any .jsonl file given
as the name itself (format auto-detected).
"""
from __future__ import annotations

import os

from llamarl_core.data.arith import arith_examples
from llamarl_core.data.example import Example
from llamarl_core.data.loaders import load_examples

DEFAULT_ARITH_SIZES = {"train": 5000, "test": 200}
_WHERE_TO_GET = {
    "gsm8k": ("gsm8k", "the public repository openai/grade-school-math, file "
              "grade_school_math/data/test.jsonl (or train.jsonl)"),
    "math500": ("math", "the public repository openai/prm800k, file "
                "prm800k/math_splits/test.jsonl"),
}


_REWARD_BY_DATA = {"arith": "arith", "gsm8k": "gsm8k", "math500": "math"}
_REWARD_BY_SOURCE = {"arith": "arith", "math": "math"}  # anything else: gsm8k's numeric rule


def default_reward(name: str, source: str | None = None) -> str:
    """The verifier a data set is scored with when the config says `data.reward=auto`."""
    return _REWARD_BY_DATA.get(name) or _REWARD_BY_SOURCE.get(source or "", "gsm8k")


def resolve_dataset(
    name: str,
    path: str | None,
    split: str,
    num_examples: int | None = None,
    seed: int = 0,
    on_error: str = "raise",
    **difficulty,
) -> list[Example]:
    """Examples for ``split``; ``num_examples`` keeps the first N (arith: generates N)."""
    if name == "arith":
        count = DEFAULT_ARITH_SIZES.get(split, 200) if num_examples is None else num_examples
        return arith_examples(split, count, seed, **difficulty)
    if difficulty:
        raise ValueError(f"difficulty knobs {sorted(difficulty)} only apply to 'arith'")
    if name in _WHERE_TO_GET:
        fmt, where = _WHERE_TO_GET[name]
        if not path:
            raise ValueError(
                f"data set {name!r} needs a local file: get {where}, then set "
                f"data.path=/path/to/{split}.jsonl (nothing is downloaded)"
            )
        file_path = os.path.join(path, f"{split}.jsonl") if os.path.isdir(path) else path
        examples = load_examples(file_path, fmt=fmt, on_error=on_error)
    elif name.endswith(".jsonl") or (path and path.endswith(".jsonl")):
        examples = load_examples(path or name, fmt="auto", on_error=on_error)
    else:
        raise ValueError(
            f"unknown data set {name!r}: use 'arith', 'gsm8k', 'math500' or a .jsonl path"
        )
    return examples if num_examples is None else examples[:num_examples]
