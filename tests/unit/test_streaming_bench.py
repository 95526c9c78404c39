"""`llamarl bench streaming` runs end to end and writes the fields the rows of
docs/RESULTS.md read, with the within-repeat ratios taken from its own runs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_streaming_writes_the_ratio_of_medians_and_the_ratio_within_each_repeat(tmp_path):
    out = tmp_path / "streaming.json"
    # its own process: the bench wraps the engine's forward functions to time them
    subprocess.run([sys.executable, "-m", "llamarl_cli.main", "bench", "streaming", "--out", str(out),
                    "--presets", "tiny-2m", "--steps", "3", "--prompts-per-step", "4", "--group-size", "2",
                    "--batch-size", "8", "--new-tokens", "24", "--repeats", "2"], check=True, timeout=120,
                   cwd=ROOT, capture_output=True)
    report = json.loads(out.read_text())
    assert report["command"].startswith("llamarl bench streaming --out ")
    [case] = report["cases"]
    runs = case["runs"]
    each = [(s["tokens"] / s["seconds"]) / (c["tokens"] / c["seconds"])
            for s, c in zip(runs["streaming"], runs["chunked"])]
    per = report["streaming_vs_chunked_per_repeat"]
    assert per == case["streaming_vs_chunked_per_repeat"] and per["each"] == pytest.approx(each)
    assert per["min"] <= per["median"] <= per["max"] and len(each) == 2
    med = case["medians"]
    assert report["streaming_vs_chunked"] == pytest.approx(
        med["streaming"]["tokens_per_s"] / med["chunked"]["tokens_per_s"])
    # same prompts and seed each repeat: the token and step counts do not depend on the machine
    assert len({r["tokens"] for r in runs["chunked"]}) == 1 == len({r["decode_steps"] for r in runs["streaming"]})
    # 3 chunks of 8 rows in 8 slots: chunked drains the slots at every chunk's end, streaming once
    assert med["streaming"]["decode_steps"] < med["chunked"]["decode_steps"]
    assert report["tokens_per_decode_step_ratio"] > 1
