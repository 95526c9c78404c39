"""The example's reward, the README's "Bring your own task" word for word: the file names it as
`data.reward=examples/my_task/my_reward.py:score`; it runs in a reward worker process."""


def score(completion: str, example: dict) -> float:
    """1 for the target on the last line, 0.5 for the target anywhere, else 0."""
    lines = completion.strip().splitlines()
    if lines and lines[-1].strip() == example["target"]:
        return 1.0
    if example["target"] in completion:
        return 0.5
    return 0.0
