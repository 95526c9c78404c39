"""`load_split`: the rule that divides a run's data into the rows it trains on and the rows it
holds out. One place: the roles (executors/setup.py), the pre-launch check and `llamarl eval`
all call it, so `eval split=test` scores exactly the rows training never saw.

Without `data.eval_path`, a file that holds both splits (one JSONL/table file, one saved
Dataset) gives its last rows to the held-out set and the rows before them to training. How
many (`held_out_count`, the one rule): `data.num_eval_examples` when set (it must leave a row
to train on, else exit 2 naming the key); unset, 200 but at most a fifth of the file's rows
(at least one), so a small file of a user's own task still trains on most of its rows. The
split is a fixed slice of the file (no shuffle, so no seed): every role, every restart and
every later eval agrees on it. With `data.eval_path` or the built-in `arith` task (which draws
each split with `data.seed`) the held-out set is `data.num_eval_examples` rows, unset 200; so
with a reasoning-gym task (`data/reasoning_gym_tasks.py`: the held-out rows come from a seed of
their own, less any question also in train).
"""
from __future__ import annotations

from llamarl_core.data.datasets import resolve_dataset, split_source
from llamarl_core.data.example import Example
from llamarl_core.data.loaders import Keys
from llamarl_core.data.reasoning_gym_tasks import task_examples


def data_keys(d) -> Keys:
    return Keys(prompt=d.prompt_key, answer=d.answer_key, messages=d.messages_key)


def split_path(data, split: str) -> str | None:
    """The file a split is read from: `data.path` for train, `data.eval_path` (else `data.path`)."""
    return data.path if split == "train" else (data.eval_path or data.path)


def holds_both_splits(d) -> bool:
    """True when training splits one file itself (no `data.eval_path`, same rows for both)."""
    return d.name not in ("arith", "reasoning_gym") and not d.eval_path and (
        split_source(d.name, d.path, "train") == split_source(d.name, d.path, "test"))


def load_split(d, split: str) -> list[Example]:
    """The split's examples of a `DataConfig`; a file's list keeps its `.report` (lines skipped
    by on_error=skip)."""
    if d.name == "arith":
        n = d.num_train_examples if split == "train" else eval_count(d)
        return resolve_dataset("arith", None, split, num_examples=n, seed=d.seed, **d.arith_knobs())
    if d.name == "reasoning_gym":
        n = d.num_train_examples if split == "train" else eval_count(d)
        return task_examples(d.task, split, n, d.seed, d.task_config, num_train=d.num_train_examples)
    path = split_path(d, split)
    one_file = holds_both_splits(d)
    n = None if split == "train" or one_file else (eval_count(d) or None)
    examples = resolve_dataset(d.name, path, split, num_examples=n, seed=d.seed, on_error=d.on_error,
                               keys=data_keys(d))
    if one_file:
        held_out = held_out_count(d.num_eval_examples, len(examples), path or d.name)
        examples = examples[:-held_out] if split == "train" else examples[-held_out:]
    return examples


DEFAULT_NUM_EVAL_EXAMPLES = 200  # held-out rows when data.num_eval_examples is unset
MAX_DEFAULT_HELD_OUT_FRACTION = 0.2  # ... but of a one-file data set, at most this share of its rows


def eval_count(d) -> int:
    """`data.num_eval_examples`, unset → 200: the held-out count of `arith`, of a reasoning-gym
    task and of `data.eval_path`."""
    return DEFAULT_NUM_EVAL_EXAMPLES if d.num_eval_examples is None else d.num_eval_examples


def held_out_count(num_eval_examples: int | None, num_rows: int, path: str) -> int:
    """How many tail rows of a one-file data set are held out. Unset: min(200, a fifth of the
    rows), at least 1 (200 rows → 40 held out, 160 trained on). Set: that many, refused (naming
    the key) when it leaves no row to train on."""
    if num_eval_examples is None:
        if num_rows >= 2:
            return max(1, min(DEFAULT_NUM_EVAL_EXAMPLES, int(num_rows * MAX_DEFAULT_HELD_OUT_FRACTION)))
        raise ValueError(f"{path} holds {num_rows} row(s): a one-file data set needs at least 2 (one "
                         f"held out, one to train on); add rows or set data.eval_path")
    if 0 < num_eval_examples < num_rows:
        return num_eval_examples
    asked = "0 (all rows)" if num_eval_examples == 0 else str(num_eval_examples)
    raise ValueError(f"data.num_eval_examples={asked}: the held-out set is the last rows of {path} "
                     f"(no data.eval_path), which holds {num_rows} row(s), so none would be left to "
                     f"train on; set data.eval_path or data.num_eval_examples below {num_rows}")


def split_rule(d) -> str:
    """Why the held-out count is what it is, in words, for the pre-launch print and `llamarl eval`."""
    if d.num_eval_examples is not None:
        return f"data.num_eval_examples={d.num_eval_examples}"
    return (f"data.num_eval_examples unset: min({DEFAULT_NUM_EVAL_EXAMPLES}, a fifth of the rows); "
            f"set it, or data.eval_path, to choose")
