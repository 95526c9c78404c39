"""Evaluation metrics from per-example predictions: accuracy, pass@k, maj@k.

Why summaries are computed only from predictions: data-parallel ranks each return their
predictions, and one `summarize` over the merged list gives the same numbers whatever the
number of ranks (a mean of per-rank means would not, with uneven shards).

Definitions (docs/EVAL.md has the worked formulas):
- a sample is *correct* when its reward is 1.0 (the verifiers are binary; a partial or
  format-only reward never counts as solved);
- accuracy: mean over examples of the greedy completion's correctness;
- pass@k: Chen et al. 2021 (arXiv 2107.03374, eq. 1), unbiased from n >= k samples with c
  correct: 1 - C(n-c, k) / C(n, k), averaged over examples; pass@1 = mean c / n;
- maj@k: the answer most of the *first k* samples commit to is correct (samples with no
  extractable answer do not vote; ties go to the answer seen first);
- with an environment, per episode: `turns_mean`, `tool_calls_mean`, `tool_errors`,
  `truncated_frac` (`episode_summary`).
"""
from __future__ import annotations

from typing import Optional, Sequence

CORRECT_REWARD = 1.0  # reward at or above which a sample counts as solved
_EPS = 1e-9


def is_correct(reward: float) -> bool:
    return reward >= CORRECT_REWARD - _EPS


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased P(at least one of k samples drawn without replacement from n is correct).

    Product form of 1 - C(n-c, k)/C(n, k) = 1 - prod_{i=n-c+1..n} (1 - k/i): no big
    binomials, exact 1.0 when fewer than k samples are wrong.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def maj_at_k(answers: Sequence[Optional[str]], rewards: Sequence[float], k: int) -> float:
    """1.0 when the majority answer among the first k samples is correct, else 0.0.

    `answers[i]` is the normalised final answer sample i commits to (None: no answer; it
    does not vote) and `rewards[i]` its reward; equal answers share a verdict, so the
    majority's verdict is its first sample's.
    """
    if len(answers) != len(rewards):
        raise ValueError(f"maj_at_k got {len(answers)} answers but {len(rewards)} rewards")
    if not 1 <= k <= len(answers):
        raise ValueError(f"maj_at_k needs 1 <= k <= {len(answers)} samples, got k={k}")
    votes: dict[str, int] = {}
    first_reward: dict[str, float] = {}
    for answer, reward in zip(answers[:k], rewards[:k]):
        if answer is None:
            continue
        votes[answer] = votes.get(answer, 0) + 1
        first_reward.setdefault(answer, reward)
    if not votes:
        return 0.0
    winner = max(votes, key=votes.__getitem__)  # dicts keep insertion order: first seen wins ties
    return 1.0 if is_correct(first_reward[winner]) else 0.0


def summarize(predictions: Sequence[dict]) -> dict:
    """The summary dict of `EvalResult` from per-example predictions (see module docstring).

    Each prediction needs `greedy_reward`, `rewards`, `answers`, `finish_reasons` and
    `num_tokens`; all examples must have the same number of samples n.
    """
    n_examples = len(predictions)
    if n_examples == 0:
        return {"n_examples": 0, "n_samples": 0, "accuracy": 0.0, "pass@1": 0.0,
                "pass@k": {}, "maj@k": {}, "mean_reward": 0.0, "truncated_fraction": 0.0,
                "mean_completion_tokens": 0.0}
    sample_counts = {len(p["rewards"]) for p in predictions}
    if len(sample_counts) != 1:
        raise ValueError(f"predictions mix sample counts {sorted(sample_counts)}")
    n = sample_counts.pop()
    correct = [sum(is_correct(r) for r in p["rewards"]) for p in predictions]
    reasons = [r for p in predictions for r in p["finish_reasons"]]
    tokens = [t for p in predictions for t in p["num_tokens"]]
    return {
        "n_examples": n_examples,
        "n_samples": n,
        "accuracy": _mean(float(is_correct(p["greedy_reward"])) for p in predictions),
        "pass@1": _mean(c / n for c in correct),
        "pass@k": {k: _mean(pass_at_k(n, c, k) for c in correct) for k in range(1, n + 1)},
        "maj@k": {k: _mean(maj_at_k(p["answers"], p["rewards"], k) for p in predictions)
                  for k in range(1, n + 1)},
        "mean_reward": _mean(r for p in predictions for r in p["rewards"]),
        "truncated_fraction": _mean(float(r == "length") for r in reasons),
        "mean_completion_tokens": _mean(tokens),
        **(episode_summary(predictions) if "turns" in predictions[0] else {}),
    }


EPISODE_COUNTS = ("turns", "tool_calls", "tool_errors", "truncated")  # per sample, with an environment


EPISODE_SUMMARY_KEYS = ("turns_mean", "tool_calls_mean", "tool_errors", "truncated_frac")  # episode_summary's


def episode_summary(predictions: Sequence[dict]) -> dict:
    """Over every sample's episode: mean turns, mean tool calls (the tool-call rate per episode),
    tool errors (a sum) and the share truncated (turn/episode caps, or its environment failed),
    as training's `env/*` metrics count them (observe/rollout_stats.py)."""
    counts = {k: [x for p in predictions for x in p[k]] for k in EPISODE_COUNTS}
    return {"turns_mean": _mean(counts["turns"]), "tool_calls_mean": _mean(counts["tool_calls"]),
            "tool_errors": sum(counts["tool_errors"]), "truncated_frac": _mean(counts["truncated"])}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
