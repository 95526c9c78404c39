"""pipeline/both_idle_frac from hand-made timelines (transport/idle.py)."""
from __future__ import annotations

import json

import pytest

from llamarl_core.transport.idle import TimelineTail, both_idle_frac, both_idle_s, union


def span(role, rank, state, t0, t1):
    return {"role": role, "rank": rank, "state": state, "t0": t0, "t1": t1}


def test_union_merges_overlaps_and_drops_empty_intervals():
    assert union([(3, 4), (0, 1), (0.5, 2), (5, 5)]) == [(0, 2), (3, 4)]


def test_both_idle_is_the_window_minus_the_union_of_both_roles_busy_time():
    # window [0, 10]. trainer busy [1,3] and [6,7]; generator busy [2,5] on rank 0, [8,9] on
    # rank 1; "wait" spans and the reward role never count as busy.
    spans = [span("trainer", 0, "train", 1, 3), span("trainer", 0, "wait", 3, 6),
             span("trainer", 0, "train", 6, 7), span("generator", 0, "generate", 2, 5),
             span("generator", 1, "generate", 8, 9), span("generator", 1, "wait", 0, 8),
             span("reward", 0, "score", 0, 10)]
    # busy union: [1,5] ∪ [6,7] ∪ [8,9] = 6 s → both idle: [0,1], [5,6], [7,8], [9,10] = 4 s
    assert both_idle_s(spans, ("trainer", "generator"), 0, 10) == pytest.approx(4.0)
    assert both_idle_frac(spans, ("trainer", "generator"), 0, 10) == pytest.approx(0.4)
    # clipped to a window: [4, 8] → busy [4,5], [6,7] → idle 2 of 4 s
    assert both_idle_frac(spans, ("trainer", "generator"), 4, 8) == pytest.approx(0.5)


def test_a_pipeline_with_no_gap_is_never_both_idle():
    spans = [span("trainer", 0, "train", 0, 2), span("generator", 0, "generate", 1.5, 4),
             span("trainer", 0, "sync", 4, 5)]
    assert both_idle_frac(spans, ("trainer", "generator"), 0, 5) == 0.0


def test_timeline_tail_reads_only_new_complete_lines(tmp_path):
    folder = tmp_path / "timeline"
    folder.mkdir()
    path = folder / "generator_0.jsonl"
    path.write_text(json.dumps(span("generator", 0, "generate", 0, 1)) + "\n"
                    + '{"role": "generator", "rank": 0, "sta')  # a line still being written
    (folder / "reward_0.jsonl").write_text(json.dumps(span("reward", 0, "score", 0, 1)) + "\n")
    tail = TimelineTail(str(tmp_path), ("trainer", "generator"))
    assert len(tail.read()) == 1 and tail.roles_seen() == {"generator"}
    with open(path, "a") as f:
        f.write('te": "wait", "t0": 1, "t1": 2}\n')
    assert [s["state"] for s in tail.read()] == ["generate", "wait"]
    assert len(tail.read()) == 2  # nothing new: nothing read twice
