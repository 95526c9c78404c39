"""A span cut into segments while it runs (transport/timeline.Timeline.split): a streaming
generator's one "generate" span can last the whole run, and what it publishes (busy seconds,
the timeline file that `pipeline/both_idle_frac` reads) must count it as it goes."""
from __future__ import annotations

import json
import time

import pytest

from llamarl_core.transport.timeline import Timeline


def lines(timeline: Timeline) -> list[dict]:
    with open(timeline.path) as f:
        return [json.loads(x) for x in f.read().splitlines()]


def test_an_open_span_counts_as_busy_and_split_writes_contiguous_segments(tmp_path):
    t = Timeline(str(tmp_path), "generator", 0)
    with t.span("generate", chunk=0, version=3):
        time.sleep(0.05)
        # still open: its time so far is busy already (it used to count only once it ended)
        assert t.totals()["busy_s"] >= 0.05
        assert lines(t) == []
        t.split(chunk=1, version=4)
        first = lines(t)
        assert [(s["state"], s["chunk"], s["version"]) for s in first] == [("generate", 0, 3)]
        with t.span("sync"):  # nested: split never touches it
            time.sleep(0.01)
        time.sleep(0.02)
    spans = lines(t)
    assert [(s["state"], s.get("chunk")) for s in spans] == [("generate", 0), ("sync", None), ("generate", 1)]
    a, b = spans[0], spans[2]
    assert b["t0"] == a["t1"] and b["version"] == 4  # no gap: one span in two segments
    assert t.busy_s["generate"] == pytest.approx(b["t1"] - a["t0"])
    # ended: nothing open is added twice
    assert t.totals()["busy_s"] == pytest.approx(sum(t.busy_s.values()))


def test_split_outside_any_span_and_an_open_wait_change_nothing(tmp_path):
    t = Timeline(str(tmp_path), "trainer", 0)
    t.split(chunk=1)
    assert lines(t) == [] and t.totals()["busy_s"] == 0.0
    with t.span("wait"):
        time.sleep(0.02)
        assert t.totals()["busy_s"] == 0.0  # waiting is idle, open or not
