"""The weight-sync benchmark runs end to end on a tiny size and writes its JSON."""

import json

from llamarl_core.bench.weight_sync_bench import print_table, run_weight_sync_bench


def test_bench_reports_each_transport_against_memcpy_of_the_same_bytes(tmp_path):
    out = tmp_path / "ws.json"
    result = run_weight_sync_bench(sizes_mb=(1,), repeats=2, out=out, bucket_mb=0.5)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    (row,) = result["sizes"]
    # 1 MiB of float32 = 1048576 B in one 16-MiB-or-less tensor; a 0.5 MiB bucket is two
    # pieces of 256 KiB in flight (ddma_plan.piece_bytes), so the DDMA plan cuts it in 4
    assert row["bytes"] == 1048576 and row["num_tensors"] == 1 and row["num_pieces"] == 4
    assert result["config"]["sync"] == "ddma 1:1"
    for variant in ("memcpy", "broadcast", "collective", "shm"):
        assert len(row["raw"][variant]) == 2 and row["median_gbps"][variant] > 0
    for transport in ("broadcast", "collective", "shm"):
        assert row["ratio_to_memcpy"][transport] == row["median_gbps"][transport] / row["median_gbps"]["memcpy"]
    assert result["machine"]["torch_version"] and result["config"]["repeats"] == 2
    print_table(result)


def test_layout_bench_reports_every_layout_and_transport_in_the_contract_shape():
    from llamarl_core.bench.ddma_bench import parse_layout, run_layout_bench

    cases = run_layout_bench([parse_layout("1:1"), parse_layout("2:1")], size_mb=16, repeats=1)
    assert [(c["trainer_ranks"], c["generator_ranks"], c["transport"]) for c in cases] == [
        (1, 1, "shm"), (1, 1, "collective"), (2, 1, "shm"), (2, 1, "collective")]
    for c in cases:
        # one 16 MiB float32 tensor [1024, 4096]: 1:1 moves it whole over one link; 2:1 moves
        # the same bytes as two 8 MiB links (rows 0-511 and 512-1023)
        assert c["bytes"] == 16 << 20
        assert c["link_bytes"] == (16 << 20) // c["trainer_ranks"]
        assert c["gbps"] == c["bytes"] / c["seconds"] / 1e9
        assert c["fraction_of_memcpy"] == c["memcpy_seconds"] / c["seconds"]
