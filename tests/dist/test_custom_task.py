"""Bring your own task, end to end: `llamarl train` on a JSONL of {"input", "target"} rows mapped by
data.prompt_key/data.answer_key, a held-out Parquet file read through `datasets`, and a reward
from a .py file that raises on every odd-length completion and sleeps past the timeout on one
example. One short run (the expensive part) serves every assertion below."""
from __future__ import annotations

import importlib.util
import json

import pytest

from test_runtime import metrics, train

pytest.importorskip("datasets")

REWARD = '''
import time

def score(completion, example):
    if example["mode"] == "sleep":
        time.sleep(60)                        # past resources.reward.timeout_s: scores 0
    if len(completion) % 2:
        raise ValueError(f"odd length {len(completion)}")    # every other sample, roughly
    # above 1 and below 0 on purpose: a custom reward's range is its own
    return completion.count("1") + 0.25 * len(example["target"]) - 1.0
'''
TRAIN = [{"input": "12+34", "target": "46", "mode": "ok"}, {"input": "50+21", "target": "71", "mode": "ok"},
         {"input": "33+33", "target": "66", "mode": "sleep"}, {"input": "10+11", "target": "21", "mode": "ok"}]
HELD_OUT = [{"input": "20+22", "target": "42", "mode": "ok"}, {"input": "15+15", "target": "30", "mode": "ok"}]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = tmp_path_factory.mktemp("custom")
    (tmp / "reward.py").write_text(REWARD)
    lines = [json.dumps(r) for r in TRAIN[:2]] + ["{a malformed line"] + [json.dumps(r) for r in TRAIN[2:]]
    (tmp / "train.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(pa.Table.from_pylist(HELD_OUT), tmp / "held_out.parquet")
    run_dir = tmp / "run"
    out = train(run_dir, "run.max_steps=3", "algorithm.prompts_per_step=2", "algorithm.group_size=2",
                "data.name=generic", f"data.path={tmp / 'train.jsonl'}", f"data.eval_path={tmp / 'held_out.parquet'}",
                "data.prompt_key=input", "data.answer_key=target", "data.on_error=skip",
                f"data.reward={tmp / 'reward.py'}:score", "resources.reward.timeout_s=1.0",
                "generation.max_prompt_tokens=32", "logging.trained_samples_per_step=4",
                "run.weight_checksums=false", "resources.reward.workers=2", "logging.tensorboard=false")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    spec = importlib.util.spec_from_file_location("test_reward_file", tmp / "reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the test may import it; the controller never did
    return run_dir, out, module


def expected(fn, completion: str, example: dict) -> float:
    """What the run must have scored: 0 where the function times out or raises."""
    if example["mode"] == "sleep":
        return 0.0
    try:
        return fn(completion, example)
    except ValueError:
        return 0.0


def test_the_logged_reward_mean_is_the_reward_function_on_the_trained_samples(run):
    run_dir, _, module = run
    lines = metrics(run_dir)
    assert [m["step"] for m in lines] == [1, 2, 3]
    samples = [json.loads(x) for x in (run_dir / "trained_samples.jsonl").read_text().splitlines()]
    for m in lines:
        rows = [s for s in samples if s["step"] == m["step"]]
        assert len(rows) == 4  # 2 prompts x 2 samples: the whole batch
        want = []
        for s in rows:
            row = TRAIN[s["example_id"]]  # the malformed line was skipped: ids index TRAIN
            example = {**row, "id": f"train-{[1, 2, 4, 5][s['example_id']]}", "prompt": row["input"],
                       "reference": row["target"]}
            want.append(expected(module.score, s["completion"], example))
            assert s["reward"] == pytest.approx(want[-1]), s
        assert m["reward/mean"] == pytest.approx(sum(want) / len(want), abs=1e-4)


def test_errors_and_timeouts_score_zero_are_counted_and_the_run_finishes(run):
    run_dir, out, _ = run
    last = metrics(run_dir)[-1]
    assert last["reward/errors"] > 0 and last["reward/timeouts"] > 0
    log = (run_dir / "logs" / "reward_0.log").read_text()
    assert log.count("reward: first error of") == 1 and 'raise ValueError(f"odd length' in log
    assert "Traceback (most recent call last)" in log and log.count("reward: first timeout of") == 1


def test_the_skipped_line_is_printed_and_in_the_summary_and_eval_read_the_parquet_file(run):
    run_dir, out, _ = run
    assert "data: skipped 1 bad line(s) of" in out.stdout and "line 3: not valid JSON" in out.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["data_skipped_lines"] == {"train": 1, "test": 0}
    evals = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {e["reference"] for e in evals} <= {"42", "30"} and evals  # the held-out Parquet rows
