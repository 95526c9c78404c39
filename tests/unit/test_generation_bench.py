"""`llamarl bench generation` runs end to end and writes the documented JSON fields."""
import json

import pytest

from llamarl_cli.main import main

pytest.importorskip("transformers")


def test_bench_generation_writes_ratio_timings_and_machine_info(tmp_path):
    out = tmp_path / "gen.json"
    argv = ["bench", "generation", "--out", str(out), "--sizes", "tiny-2m", "--threads", "1", "--batch-size", "2",
            "--prompt-len", "4", "--new-tokens", "3", "--repeats", "1",
            "--long-tail-prompts", "6", "--long-tail-new-tokens", "12", "--long-tail-stops", "40"]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["command"] == "llamarl " + " ".join(argv)
    [case] = report["cases"]
    assert case["preset"] == "tiny-2m"
    assert len(case["raw_seconds"]["ours"]) == len(case["raw_seconds"]["hf"]) == 1
    assert case["greedy_rows_identical"] == 1.0  # same weights, greedy: identical tokens
    assert {"torch", "machine", "command"} <= set(report)
    [quant] = report["quantization"]
    # Quantization changes the model a little, and int8's 255 levels per channel less than
    # fp8 e4m3's 3 mantissa bits (relative step ~1/127 of the row max vs ~1/16 of the value).
    assert 0 < quant["kl_int8"] < quant["kl_fp8_emulated"] < 1e-2
    tail = report["long_tail"]
    assert tail["ratio"] == pytest.approx(tail["continuous_tokens_per_s"] / tail["static_tokens_per_s"])
    assert tail["ratio_vs_padded"] == pytest.approx(
        tail["continuous_tokens_per_s"] / tail["static_padded_tokens_per_s"])
    assert tail["prompts"] == 6 and 1.0 <= tail["max_to_mean_new_tokens"] <= 12
    # Same prompts, weights and stop tokens in both modes: each mode generated real tokens.
    assert all(n > 6 for mode in ("continuous", "static", "static_padded") for n in tail["tokens"][mode])
