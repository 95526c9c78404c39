"""Values out of a result JSON for scripts/results_table.py: key paths and the machine load.

Key paths: `a.b`, `list[3]`, `list[k=v]` (the item whose `k` is `v`; `[k=v,j=w]` both), `list[*].x`
(every item's `x`, as a list). A path the JSON lacks raises `MissingKey`, so a renamed key fails
the table's check instead of showing as a blank.
"""
from __future__ import annotations

import re

LOAD_KEYS = ("machine.loadavg_at_start", "machine.load_average_at_start", "machine.loadavg", "loadavg_at_start",
             "loadavg")


class MissingKey(KeyError):
    pass


def get(doc, path: str):
    """The value at `path` (module docstring's syntax); MissingKey when it is not there."""
    node = doc
    for name, selector in re.findall(r"([^.\[\]]+)|\[([^\]]*)\]", path):
        if name:
            if not isinstance(node, dict) or name not in node:
                raise MissingKey(path)
            node = node[name]
        elif selector == "*":
            rest = path[path.index("[*]") + 3:].lstrip(".")
            if not isinstance(node, list):
                raise MissingKey(path)
            return [get(item, rest) if rest else item for item in node]
        elif "=" in selector:
            want = dict(cond.split("=", 1) for cond in selector.split(","))
            hits = [x for x in node if isinstance(x, dict) and all(str(x.get(k)) == w for k, w in want.items())
                    ] if isinstance(node, list) else []
            if not hits:
                raise MissingKey(path)
            node = hits[0]
        else:
            if not isinstance(node, list) or not -len(node) <= int(selector) < len(node):
                raise MissingKey(path)
            node = node[int(selector)]
    return node


def at(doc: dict, path: str):
    """The value at key path `path`, or None where the JSON has none."""
    try:
        return get(doc, path)
    except MissingKey:
        return None


def machine_load(doc: dict, keys: tuple[str, ...], note_key: str = "note") -> str:
    """1-minute load average when the JSON was written (2 cores), else what its note says."""
    for key in keys + LOAD_KEYS:
        x = at(doc, key)
        if isinstance(x, list) and x and all(isinstance(y, (int, float)) for y in x):
            return f"{x[0]:.1f}"
    m = re.search(r"load average[s]? ([0-9][^;()]*)", str(at(doc, note_key) or ""))
    return m.group(1).strip().rstrip(",.") if m else "not recorded"
