"""`llamarl bench sync-vs-async` end to end on the tiny recipe: one sync and one async run of
2 RL steps each, then valid JSON with the contract fields and both PNGs. No timing asserted."""
import json

from llamarl_cli.main import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_bench_runs_both_modes_and_writes_json_and_two_pngs(tmp_path, capsys):
    out = tmp_path / "sva.json"
    code = main(["bench", "sync-vs-async", "--steps", "2", "--repeats", "1", "--out", str(out),
                 "--work-dir", str(tmp_path / "runs"), "recipe=cpu_tiny",
                 # warmstart.steps=2, not 0: with no warm start the first training forward
                 # reuses RoPE tables cached under inference_mode by the initial eval.
                 "warmstart.steps=2", "data.num_eval_examples=8", "run.eval_every_steps=1"])
    assert code == 0, capsys.readouterr().err
    d = json.loads(out.read_text())
    for mode in ("sync", "async"):
        m = d[mode]
        assert len(m["step_s"]) == 2 and m["step_s_min"] <= m["step_s_median"] <= m["step_s_max"]
        assert all(0.0 <= f <= 1.0 for f in m["role_busy_fraction"].values())
        assert len(m["runs"]) == 1 and m["runs"][0]["accuracy_curve"][0]["version"] == 0
    assert set(d["sync"]["role_busy_fraction"]) == {"actor", "reward"}
    assert set(d["async"]["role_busy_fraction"]) == {"generator", "reward", "trainer"}
    assert d["ideal_speedup"] > 0 and d["config"]["algorithm"]["max_offpolicy_steps"] == 1
    for key in ("timeline", "accuracy"):
        with open(d["plots"][key], "rb") as f:
            assert f.read(8) == PNG_MAGIC
    assert d["plots"]["timeline"] == str(tmp_path / "sva_timeline.png")


def test_bench_weight_sync_writes_the_weight_sync_json_with_its_command(tmp_path, capsys):
    out = tmp_path / "ws.json"
    assert main(["bench", "weight-sync", "--sizes-mb", "1", "--repeats", "1", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["command"] == f"llamarl bench weight-sync --sizes-mb 1 --repeats 1 --out {out}"
    assert d["benchmark"] == "weight_sync" and d["config"]["sizes_mb"] == [1.0]
    assert set(d["sizes"][0]["ratio_to_memcpy"]) == {"broadcast", "collective", "shm"}
