"""Every RL knob trains 2 steps in a real `llamarl train` run; two runs cover every value.

    sync  (k = 0, 2 actor ranks, DDP)    ppo (std advantage) with DAPO clip-higher, dynamic sampling, overlong=filter,
                                         cosine schedule, 2 updates x 2 mini-batches, W&B offline
    async (k = 1, 2 trainer ranks FSDP2) KL to the sharded reference, dynamic sampling across
                                         data-parallel ranks, overlong=penalty, linear schedule,
                                         decoupled AIPO over 2 updates x 2 mini-batches
overlong=keep and lr_schedule=constant are the defaults every other run trains. The sync run's
ppo + std advantage is also one of test_every_choice_trains' combinations.

The data: GSM8K-format prompts whose answers are 0 or 7. The untrained byte model writes random
bytes, and a digit among them often enough makes some groups disagree while most score alike:
dynamic sampling has both to sort out.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from llamarl_core.algorithms.lr_schedule import lr_at
from llamarl_core.config.choices import LR_SCHEDULES, OVERLONG_MODES
from llamarl_core.config.schema import AlgorithmConfig
from llamarl_core.observe.tensorboard_log import scalar_items
from test_runtime import metrics, processes_mentioning, train

COMMON = ["run.max_steps=2", "data.num_eval_examples=4", "data.name=gsm8k", "data.instruction=''",
          "generation.max_prompt_tokens=64",
          "algorithm.dynamic_sampling=true", "algorithm.max_resample_rounds=6", "algorithm.lr=3e-7",
          "algorithm.lr_warmup_steps=0", "algorithm.updates_per_batch=2", "algorithm.mini_batches=2"]
RUNS = {
    "sync": ["algorithm.max_offpolicy_steps=0", "algorithm.prompts_per_step=2", "algorithm.name=ppo",
             "algorithm.advantage=std",
             "algorithm.clip_eps_low=0.2", "algorithm.clip_eps_high=0.28", "algorithm.overlong=filter",
             "algorithm.lr_schedule=cosine", "algorithm.min_lr_ratio=0.1", "logging.wandb=true",
             "logging.trained_samples_per_step=64"],
    "async": ["algorithm.max_offpolicy_steps=1", "resources.trainer.num_devices=2",
              "resources.trainer.strategy=fsdp2", "resources.cpu_cores=4", "algorithm.kl_coef=0.05",
              "algorithm.overlong=penalty", "algorithm.overlong_buffer_tokens=4", "algorithm.lr_schedule=linear"],
}


def _value(run: str, key: str) -> str:
    return next(w.split("=", 1)[1] for w in RUNS[run] if w.startswith(f"algorithm.{key}="))


def test_the_runs_cover_every_value_of_every_closed_knob():
    defaults = AlgorithmConfig()
    for key, values in (("overlong", OVERLONG_MODES), ("lr_schedule", LR_SCHEDULES)):
        assert {_value(r, key) for r in RUNS} | {getattr(defaults, key)} == set(values)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, monkeypatch_module):
    tmp = tmp_path_factory.mktemp("knobs")
    data = tmp / "answers.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} times zero?",
                                        "answer": f"{i} * 0 = 0\n#### {0 if i % 2 == 0 else 7}"}) + "\n"
                            for i in range(64)))
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch_module.setenv(name, str(tmp / "wandb_home"))  # nothing written outside the test
    monkeypatch_module.setenv("WANDB_MODE", "offline")  # no network: files only
    out = {}
    for name, words in RUNS.items():
        run_dir = tmp / name
        done = train(run_dir, *COMMON, f"data.path={data}", *words)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        out[name] = run_dir
    return out


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("run", list(RUNS))
def test_every_knob_trains_two_steps(runs, run):
    lines = metrics(runs[run])
    assert [m["step"] for m in lines] == [1, 2]
    assert processes_mentioning(str(runs[run])) == []


@pytest.mark.parametrize("run", list(RUNS))
def test_dynamic_sampling_trains_no_group_whose_rewards_are_all_equal(runs, run):
    lines = metrics(runs[run])
    trained = [json.loads(x)["example_ids"] for x in (runs[run] / "trained_examples.jsonl").read_text().splitlines()]
    for m, ids in zip(lines, trained):
        assert m["trainer/uniform_groups_frac"] == 0.0  # measured by the learner on what it got
        assert len(ids) == m["trainer/trained_groups"] <= 4
        assert 0 <= m["trainer/resample_rounds"] <= 6
    assert any(m["trainer/dropped_groups_frac"] > 0 for m in lines)  # most groups scored alike
    assert sum(m["trainer/trained_groups"] for m in lines) > 0  # and some did not
    assert all(m["trainer/staleness_max"] <= (0 if run == "sync" else 1) for m in lines)


def test_the_trained_rows_as_the_reward_role_scored_them_hold_no_all_equal_group(runs):
    # trained_samples.jsonl: every row rank 0 trained, with the verifier's reward (the sync run
    # shapes nothing, so these are the rewards dynamic sampling judged)
    rows = [json.loads(x) for x in (runs["sync"] / "trained_samples.jsonl").read_text().splitlines()]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["step"], r["example_id"]), []).append(r["reward"])
    assert groups and all(len(g) % 4 == 0 and len(set(g)) > 1 for g in groups.values()), groups


def test_the_learning_rate_is_logged_as_set_unrounded_on_its_schedule(runs):
    # lr 3e-7 (rounding to 5 decimals used to log it as 0.0), no warm-up, decay over
    # run.max_steps = 2: p = 0, 1/2. cosine to 0.1: 3e-7 * (0.1 + 0.9 * 0.5) = 1.65e-7; linear: 1.5e-7
    for run, floor, second in (("sync", 0.1, 1.65e-7), ("async", 0.0, 1.5e-7)):
        logged = [m["trainer/lr"] for m in metrics(runs[run])]
        assert logged == [lr_at(s, 3e-7, 0, 2, _value(run, "lr_schedule"), floor) for s in (0, 1)]
        assert logged == pytest.approx([3e-7, second], rel=1e-12)


def test_overlong_modes_act_on_the_trained_rows(runs):
    for m in metrics(runs["sync"]):  # filter: the truncated rows are exactly the masked ones
        assert m["trainer/overlong_filtered_frac"] == m["generator/truncated_frac"]
    for m in metrics(runs["async"]):  # penalty: in [-1, 0], -1 for every row cut at the limit
        assert -1.0 <= m["trainer/overlong_penalty_mean"] <= -m["generator/truncated_frac"] + 1e-6


def test_the_kl_to_the_sharded_reference_is_measured(runs):
    trained = [m for m in metrics(runs["async"]) if m["trainer/trained_groups"]]
    assert trained and all(math.isfinite(m["trainer/kl"]) and m["trainer/kl"] >= 0 for m in trained)


# ---- W&B: the offline run's own files, read back -------------------------------------------
_BLOCK = 32768  # the .wandb file is a LevelDB-style log: 7-byte file header, then records in 32 KiB blocks


def _wandb_records(path: Path):
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])  # crc32c (skipped), length, type
        parts += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, or LAST of FIRST/MIDDLE/LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def test_wandb_offline_run_holds_the_tensorboard_scalars_at_the_same_steps_and_the_config(runs):
    pytest.importorskip("wandb")
    files = list((runs["sync"] / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    history, config = {}, {}
    for record in _wandb_records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            history[items.pop("_step")] = {k: v for k, v in items.items() if not k.startswith("_")}
        elif kind == "run":
            config = {i.key: json.loads(i.value_json) for i in record.run.config.update}
    for line in metrics(runs["sync"]):
        logged = history[line["step"]]
        want = dict(scalar_items(line))  # exactly what TensorBoard gets
        assert {k: logged[k] for k in want} == want
        extra = set(logged) - set(want)  # the two histograms, as W&B stores them
        assert all(k.startswith(("trainer/is_ratio/", "trainer/staleness/")) for k in extra), extra
    assert config["algorithm"]["dynamic_sampling"] is True and config["algorithm"]["clip_eps_high"] == 0.28
