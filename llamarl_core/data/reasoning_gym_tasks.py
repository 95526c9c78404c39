"""`data.name=reasoning_gym data.task=NAME`: rows of a reasoning-gym task, generated offline.

reasoning-gym (https://github.com/open-thought/reasoning-gym) builds each row `i` of a task
from `random.Random(seed + i)`, so nothing downloads and a seed fixes every row. Two seeds
`s` and `s + 1` share all rows but one; the held-out rows therefore come from a seed far away,
`data.seed + HELD_OUT_SEED_OFFSET` (row i of it is row 10**9 + i of the train seed, beyond any
train size), and any held-out question also among the train questions is removed, so train and
held-out never share a question even on tasks with few distinct problems.

Each row keeps reasoning-gym's own entry (question, answer, metadata) in `Example.fields`, with
the task name and `data.task_config`: the `reasoning_gym` reward (rewards/reasoning_gym_score.py) rebuilds the entry
from those fields in its worker process and calls the task's `score_answer`. The row's
`solution` is the answer in the tags the reward reads (`<answer>...</answer>`), so a warm start
learns the format.
"""
from __future__ import annotations

from llamarl_core.data.example import Example

HELD_OUT_SEED_OFFSET = 10**9  # held-out rows: seed data.seed + this (see the docstring)
LIST_COMMAND = "llamarl data tasks"  # the command that lists the task names


def _gym():
    try:
        import reasoning_gym
    except ImportError:
        raise ValueError("data.name=reasoning_gym needs the reasoning-gym package: "
                         "pip install 'llamarl[tasks]'") from None
    return reasoning_gym


def task_names() -> list[str]:
    """Every task reasoning-gym registers, sorted."""
    from reasoning_gym.factory import DATASETS  # noqa: F401 - registers the tasks on import
    _gym()
    return sorted(DATASETS)


def task_descriptions() -> list[tuple[str, str]]:
    """(name, the first line of the task class's docstring, or "") of every task."""
    _gym()
    from reasoning_gym.factory import DATASETS

    out = []
    for name in sorted(DATASETS):
        doc = (DATASETS[name][0].__doc__ or "").strip()
        out.append((name, doc.splitlines()[0].strip() if doc else ""))
    return out


def check_task(task: str) -> None:
    """ValueError naming data.task and the listing command when reasoning-gym has no such task."""
    names = task_names()
    if task not in names:
        raise ValueError(f"data.task={task!r} is not a reasoning-gym task ({len(names)} known; "
                         f"list them with `{LIST_COMMAND}`)")


def _rows(task: str, count: int, seed: int, task_config: dict) -> list[dict]:
    return list(_gym().create_dataset(task, size=count, seed=seed, **task_config))


def task_examples(task: str, split: str, count: int, seed: int, task_config: dict | None = None,
                  num_train: int | None = None) -> list[Example]:
    """`count` rows of `task`: train from `seed`; any other split from the held-out seed, without
    the questions of the `num_train` train rows (so it may hold fewer than `count` rows)."""
    check_task(task)
    config = dict(task_config or {})
    if split == "train":
        rows = _rows(task, count, seed, config)
    else:
        train_questions = {r["question"] for r in _rows(task, num_train or 0, seed, config)} if num_train else set()
        rows = [r for r in _rows(task, count, seed + HELD_OUT_SEED_OFFSET, config)
                if r["question"] not in train_questions]
        if not rows:
            raise ValueError(f"data.task={task}: every held-out question is also a train question "
                             f"(the task has few distinct problems); lower data.num_train_examples")
    return [Example(f"{task}-{split}-{i}", r["question"], str(r["answer"]), f"<answer>{r['answer']}</answer>",
                    "reasoning_gym", fields={"task": task, "task_config": config, "question": r["question"], "answer": r["answer"],
                                             "metadata": r["metadata"]}, where=f"{task}:{split}:{i}")
            for i, r in enumerate(rows)]
