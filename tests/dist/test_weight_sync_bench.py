"""The weight-sync benchmark runs end to end on a tiny size and writes its JSON."""

import json

from llamarl_core.bench.weight_sync_bench import print_table, run_weight_sync_bench


def test_bench_reports_each_transport_against_memcpy_of_the_same_bytes(tmp_path):
    out = tmp_path / "ws.json"
    result = run_weight_sync_bench(sizes_mb=(1,), repeats=2, out=out, bucket_mb=0.5)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    (row,) = result["sizes"]
    # 1 MiB of float32 = 1048576 B in one 16-MiB-or-less tensor; buckets of 0.5 MiB cannot
    # split a tensor, so that tensor gets one (oversized) bucket of its own.
    assert row["bytes"] == 1048576 and row["num_tensors"] == 1 and row["num_buckets"] == 1
    for variant in ("memcpy", "broadcast", "collective", "shm"):
        assert len(row["raw"][variant]) == 2 and row["median_gbps"][variant] > 0
    for transport in ("broadcast", "collective", "shm"):
        assert row["ratio_to_memcpy"][transport] == row["median_gbps"][transport] / row["median_gbps"]["memcpy"]
    assert result["machine"]["torch_version"] and result["config"]["repeats"] == 2
    print_table(result)
