"""Where a benchmark JSON came from: the command that produced it, the git commit it ran and the
machine it ran on.

Every JSON under `benchmarks/results/` records all three (`scripts/results_table.py` shows them
in the results table, docs/RESULTS.md). The machine is one dict, `machine()`, taken when the
bench starts, with `loadavg_at_start` (its 1-minute load is the table's "machine load" column)
and, from `ended(machine)`, `loadavg_at_end`: every bench records it the same way. The commit
is `git rev-parse HEAD` of this checkout, with `+dirty` when tracked files other than
`benchmarks/results/` differ from it (the code that ran is then not exactly that commit);
outside a git checkout it says so instead of guessing.
"""
from __future__ import annotations

import os
import platform
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


def load_average() -> list[float] | None:
    """1-, 5- and 15-minute load averages now (None where the OS keeps none)."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def machine(load: bool = True, **extra) -> dict:
    """What ran the bench, taken at its start: CPU, memory, Python and torch versions, the load
    (`load=False`: none, for a summary written after the run that records the run's own load);
    `extra` adds the bench's own settings (threads, device)."""
    import torch

    try:
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):
        memory_gib = None
    return {"cpu_count": os.cpu_count(), "cpu_model": _cpu_model(), "platform": platform.platform(),
            "processor": platform.processor(), "memory_gib": memory_gib, "python": platform.python_version(),
            "torch_version": torch.__version__, **({"loadavg_at_start": load_average()} if load else {}), **extra}


def ended(machine_at_start: dict) -> dict:
    """`machine_at_start` with the load at the bench's end added (`loadavg_at_end`)."""
    return {**machine_at_start, "loadavg_at_end": load_average()}
