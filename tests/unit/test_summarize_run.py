"""scripts/summarize_run.py's weight-adoption latencies, on timelines written by hand."""
import importlib.util
import json
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("summarize_run", Path(__file__).parents[2] / "scripts" / "summarize_run.py")
summarize_run = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(summarize_run)


def _write(folder: Path, role: str, spans: list[tuple]) -> None:
    folder.mkdir(exist_ok=True)
    with open(folder / f"{role}_0.jsonl", "w") as f:
        for state, t0, t1 in spans:
            f.write(json.dumps({"role": role, "rank": 0, "state": state, "t0": t0, "t1": t1}) + "\n")


def test_each_publish_is_timed_to_the_generators_next_take_and_split_by_what_it_was_doing(tmp_path):
    tl = tmp_path / "timeline"
    # publishes end at 1.0 (version 0, before RL), 3.0, 5.0, 5.5 and 8.0
    _write(tl, "trainer", [("sync", 0.9, 1.0), ("sync", 2.9, 3.0), ("sync", 4.9, 5.0), ("sync", 5.4, 5.5),
                           ("sync", 7.9, 8.0)])
    # the generator takes them at 1.01, 3.2 (it was generating: 0.2 s late), 6.0 (5.0 and 5.5 both
    # landed while it generated: one wait of 0.5 s from the newer) and 8.01 (it was waiting)
    _write(tl, "generator", [("sync", 1.01, 1.02), ("generate", 1.02, 3.2), ("sync", 3.2, 3.21),
                             ("generate", 3.21, 6.0), ("sync", 6.0, 6.01), ("wait", 6.01, 8.01),
                             ("sync", 8.01, 8.02)])
    got = summarize_run.weight_adoption(summarize_run.read_timeline(str(tmp_path)))
    gen, wait = got["published_while_generating"], got["published_while_waiting"]
    assert gen["n"] == 2 and gen["mean_ms"] == pytest.approx(350.0) and gen["max_ms"] == pytest.approx(500.0)
    assert wait["n"] == 2 and wait["mean_ms"] == pytest.approx(10.0)  # 1.0 -> 1.01 and 8.0 -> 8.01
    assert got["total_s"] == pytest.approx(0.72)
