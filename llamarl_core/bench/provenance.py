"""Where a benchmark JSON came from: the command that produced it and the git commit it ran.

Every JSON under `benchmarks/results/` records both (`scripts/results_table.py` shows them in
the results table, docs/RESULTS.md). The commit is `git rev-parse HEAD` of this checkout, with
`+dirty` when tracked files other than `benchmarks/results/` differ from it (the code that
ran is then not exactly that commit); outside a git checkout it says so instead of guessing.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NO_GIT = "unknown (not a git checkout)"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str:
    """HEAD of the checkout this code runs from, `+dirty` if its code differs from HEAD."""
    head = _git("rev-parse", "HEAD")
    if not head:
        return NO_GIT
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")
    return head + ("+dirty" if changed else "")
