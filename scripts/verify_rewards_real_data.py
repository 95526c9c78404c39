"""Check the verifiers against real data: reference solutions must score 1, shuffled pairs 0.

    python scripts/verify_rewards_real_data.py --out benchmarks/results/reward_verification.json

Parts (each skipped when its file is absent; data lives in ../shared/data by default):
- gsm8k_test_matched: every GSM8K test solution vs its own answer (expect 1319/1319).
- gsm8k_test_shuffled: solutions vs a derangement of the answers (expect ~0%; answers
  that coincide, e.g. two problems whose answer is 5, still match).
- math500_matched / math500_shuffled: the same with the `math` reward (RewardPool,
  worker processes, 2 s timeout).
- math500_matched_symbolic: matched pairs through math-verify only, no text fast path.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from llamarl_core.bench.provenance import git_commit, machine
from llamarl_core.data import Example, load_examples
from llamarl_core.rewards import RewardPool

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MAX_FAILURES_LISTED = 50


def derangement(n: int, seed: int) -> list[int]:
    """A seeded permutation with no fixed point: shuffle, then shift every index by one."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    target = {order[i]: order[(i + 1) % n] for i in range(n)}
    return [target[i] for i in range(n)]


def score_part(name: str, reward: str, examples: list[Example], shuffled: bool,
               num_workers: int = 2, seed: int = 0) -> dict:
    references = [ex.reference for ex in examples]
    if shuffled:
        references = [references[j] for j in derangement(len(examples), seed)]
    completions = [ex.solution or "" for ex in examples]
    start = time.perf_counter()
    with RewardPool(reward, num_workers=num_workers, timeout_s=2.0) as pool:
        scores = pool.score(completions, references)
        stats = dict(pool.stats)
    seconds = time.perf_counter() - start
    expected = 0.0 if shuffled else 1.0
    failures = [
        {"id": ex.id, "reference": ref, "completion_tail": (ex.solution or "")[-160:]}
        for ex, ref, score in zip(examples, references, scores) if score != expected
    ]
    correct = int(sum(score == 1.0 for score in scores))
    # A shuffled pair whose borrowed answer is the same text as its own answer is a
    # coincidence (two problems answered "5"), not a verifier error.
    coincident = [ex.reference.strip() == ref.strip() for ex, ref in zip(examples, references)]
    unexplained = sum(score != expected and not same
                      for score, same in zip(scores, coincident)) if shuffled else len(failures)
    return {
        "part": name, "reward": reward, "pairs": "shuffled" if shuffled else "matched",
        "count": len(examples), "correct": correct, "accuracy": correct / max(1, len(examples)),
        "seconds": round(seconds, 3), "pool_stats": stats, "num_unexpected": len(failures),
        "num_coincident_answers": int(sum(coincident)) if shuffled else 0,
        "num_unexplained": int(unexplained),
        "unexpected": failures[:MAX_FAILURES_LISTED],
    }


def verify_gsm8k(data_dir: Path) -> list[dict]:
    path = data_dir / "gsm8k" / "test.jsonl"
    if not path.is_file():
        return []
    examples = load_examples(str(path), fmt="gsm8k")
    return [score_part("gsm8k_test_matched", "gsm8k", examples, shuffled=False),
            score_part("gsm8k_test_shuffled", "gsm8k", examples, shuffled=True)]


def verify_math500(data_dir: Path, num_workers: int) -> list[dict]:
    path = data_dir / "math500" / "test.jsonl"
    if not path.is_file():
        return []
    examples = load_examples(str(path), fmt="math")
    return [
        score_part("math500_matched", "math", examples, False, num_workers),
        score_part("math500_matched_symbolic", "math_symbolic", examples, False, num_workers),
        score_part("math500_shuffled", "math", examples, True, num_workers),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args(argv)
    at_start = machine()
    parts = verify_gsm8k(args.data_dir) + verify_math500(args.data_dir, args.num_workers)
    if not parts:
        print(f"no data under {args.data_dir}; nothing verified", file=sys.stderr)
        return 0
    result = {
        "command": "python scripts/verify_rewards_real_data.py " + " ".join(argv or sys.argv[1:]),
        "commit": git_commit(),
        "machine": at_start,
        "parts": parts,
    }
    for part in parts:
        print(f"{part['part']:<28} {part['correct']:>5}/{part['count']:<5} "
              f"accuracy {part['accuracy']:.4f}  {part['seconds']:.2f} s  "
              f"unexplained {part['num_unexplained']}  "
              f"timeouts {part['pool_stats']['timeouts']}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
