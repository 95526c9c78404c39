"""The one reader of `<run_dir>/timeline/<role>_<rank>.jsonl` (written by `timeline.Timeline`).

`read_spans` reads a folder once (reports, bench stats, scripts); `TimelineTail` reads only the
lines added since its last read (the trainer's per-step `pipeline/both_idle_frac`). Both skip a
last line still being written; a broken line elsewhere or a span without role, state, rank,
t0 and t1 is an error naming the file and line.
"""
from __future__ import annotations

import json
import os


def read_jsonl_tolerant(path: str) -> list[dict]:
    """JSON lines of `path`; a truncated *last* line (a writer mid-line) is dropped."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().split("\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines):  # no newline after it yet: still being written
                break
            raise ValueError(f"{path}:{i}: not a JSON line ({e})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{i}: a JSON {type(row).__name__}, not an object")
        rows.append(row)
    return rows


def is_number(value, whole: bool = False) -> bool:
    return not isinstance(value, bool) and isinstance(value, int if whole else (int, float))


def check_span(span: dict, path: str, line: int) -> dict:
    if not (isinstance(span.get("role"), str) and isinstance(span.get("state"), str)
            and is_number(span.get("rank"), whole=True) and all(is_number(span.get(k)) for k in ("t0", "t1"))):
        raise ValueError(f"{path}: span {line} lacks a role, state, rank, t0 or t1 (not a timeline llamarl writes)")
    return span


def read_spans(run_dir: str, missing_ok: bool = False) -> list[dict]:
    """Every span of the run, file by file in name order; no timeline folder is [] if
    `missing_ok`, else FileNotFoundError (the run never started)."""
    folder = os.path.join(run_dir, "timeline")
    if not os.path.isdir(folder):
        if missing_ok:
            return []
        raise FileNotFoundError(f"{folder}: no timeline folder (did the run start?)")
    spans = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jsonl"):
            path = os.path.join(folder, name)
            spans += [check_span(s, path, i) for i, s in enumerate(read_jsonl_tolerant(path), 1)]
    return spans


class TimelineTail:
    """The spans of `<run_dir>/timeline/<role>_*.jsonl` for `roles`, read incrementally."""

    def __init__(self, run_dir: str, roles):
        self.folder = os.path.join(run_dir, "timeline")
        self.roles = tuple(roles)
        self.offsets: dict[str, int] = {}
        self.spans: list[dict] = []

    def read(self) -> list[dict]:
        if not os.path.isdir(self.folder):
            return self.spans
        for name in sorted(os.listdir(self.folder)):
            if not (name.endswith(".jsonl") and name.rsplit("_", 1)[0] in self.roles):
                continue
            path = os.path.join(self.folder, name)
            with open(path) as f:
                f.seek(self.offsets.get(path, 0))
                while True:
                    line = f.readline()
                    if not line.endswith("\n"):  # a line still being written: read it next time
                        break
                    self.offsets[path] = f.tell()
                    if line.strip():
                        self.spans.append(json.loads(line))
        return self.spans

    def roles_seen(self) -> set[str]:
        return {s["role"] for s in self.spans}
