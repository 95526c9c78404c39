"""Bad input is refused before launch: exit 2, one line naming the key, file or line, no
traceback, and no role started (start_role is never called) nor anything written.

Each case failed on the code before it (what happened then, in its comment). The data-file
cases live beside these in the data checks' own tests.
"""
import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from launch_guard import refused
from llamarl_core.checkpoint import checkpoints
from llamarl_core.config.load import load_config
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs, save_pretrained
from llamarl_core.runtime import procs, run_lock
from llamarl_core.runtime.run_dir import resolve_run_dir

TINY = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=128)


@pytest.fixture
def no_launch(monkeypatch):
    """Any role start fails the test: the refusal must come before launch."""
    started = []
    monkeypatch.setattr(procs, "start_role", lambda cmd, *a, **k: started.append(cmd) or pytest.fail(cmd))
    return started


# ---- recipes -------------------------------------------------------------------------
def test_malformed_recipe_yaml_names_file_line_and_column(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"  # before: a 30-line yaml.parser.ParserError traceback, exit 1
    recipe.write_text("defaults:\n  - llamarl_schema\n  - _self_\nrun:\n  max_steps: [1\n")
    refused(capsys, "plan", f"recipe={recipe}", words=(str(recipe), "line 6, column 1", "line 5, column 14"))


def test_an_unknown_top_level_recipe_key_is_called_unknown(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"  # before: "invalid value for 'runn' ... ConfigKeyError raised"
    recipe.write_text("defaults:\n  - llamarl_schema\n  - _self_\nrunn:\n  max_steps: 3\n")
    refused(capsys, "plan", f"recipe={recipe}", words=("unknown config key 'runn'",))


# ---- numbers the schema had no range for -------------------------------------------------
@pytest.mark.parametrize("word", [
    "controller.heartbeat_timeout_s=-1",  # before: accepted, as were all of these
    "controller.startup_timeout_s=0", "controller.step_timeout_s=nan", "controller.role_port_base=70000",
    "algorithm.clip_eps=0", "algorithm.kl_coef=-0.1", "run.max_time_s=-5", "resources.reward.timeout_s=inf",
])
def test_out_of_range_numbers_are_refused_naming_the_key(capsys, no_launch, word):
    refused(capsys, "train", word, words=(word.split("=")[0],))


def test_a_heartbeat_timeout_below_the_interval_is_refused(capsys):
    refused(capsys, "plan", "controller.heartbeat_interval_s=5", "controller.heartbeat_timeout_s=2",
            words=("controller.heartbeat_timeout_s=2", "controller.heartbeat_interval_s=5"))


# ---- layouts and lengths the runtime cannot run -------------------------------------------
def test_a_completion_that_cannot_fit_the_models_positions_is_refused(capsys, no_launch, tmp_path):
    # before: exit 0, completions stopped at 501 tokens, generator/truncated_frac 0.0
    refused(capsys, "train", "generation.max_new_tokens=1000", f"run.dir={tmp_path / 'run'}",
            words=("generation.max_new_tokens=1000", "512 positions", "at most 496"))
    assert not (tmp_path / "run").exists()


def test_more_trainer_ranks_than_prompts_per_step_is_refused(capsys, no_launch):
    # before: IndexError on a trainer rank after launch
    refused(capsys, "train", "algorithm.prompts_per_step=1", "resources.trainer.num_devices=2",
            "resources.cpu_cores=4", words=("algorithm.prompts_per_step=1", "2 data-parallel ranks"))


def test_more_cpu_processes_than_the_host_can_run_is_refused(capsys, no_launch):
    # before: a warning, then 64 ranks time-sharing 2 cores
    refused(capsys, "plan", "resources.cpu_cores=2", "resources.generator.num_devices=32",
            "resources.trainer.num_devices=32", "algorithm.prompts_per_step=32",
            words=("64 CPU compute processes", "resources.cpu_cores", "at most 4"))


# ---- model checkpoint against its config.json (headers only) ------------------------------
@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "ckpt"
    save_pretrained(Llama(TINY), ByteTokenizer(), path)
    return path


def test_a_truncated_model_safetensors_is_refused_before_launch(checkpoint, capsys, no_launch, tmp_path):
    weights = checkpoint / "model.safetensors"  # before: roles started and failed to load it
    weights.write_bytes(weights.read_bytes()[:-1000])
    refused(capsys, "train", f"model.checkpoint={checkpoint}", f"run.dir={tmp_path / 'run'}",
            words=("model.checkpoint=", "model.safetensors is truncated"))
    assert not (tmp_path / "run").exists()


def test_a_config_whose_hidden_size_disagrees_with_the_weights_is_refused(checkpoint, capsys, no_launch):
    config = json.loads((checkpoint / "config.json").read_text())
    config.update(hidden_size=64, head_dim=16)
    (checkpoint / "config.json").write_text(json.dumps(config))
    refused(capsys, "train", f"model.checkpoint={checkpoint}", words=("model.safetensors", "has shape", "(260, 32)",
                                                                     "(260, 64)"))


def test_eval_refuses_a_truncated_checkpoint_in_one_line_with_its_path(checkpoint, capsys):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    refused(capsys, "eval", f"checkpoint={checkpoint}", "data=arith", "num_examples=2", "--no-progress",
            words=(str(weights), "truncated"))


# ---- other verbs ---------------------------------------------------------------------
def test_report_on_a_directory_that_is_not_a_run_is_one_line(tmp_path, capsys):
    refused(capsys, "report", str(tmp_path), words=(str(tmp_path), "run directory"))


@pytest.mark.parametrize("content, words", [
    (None, ["No such file"]), ("{bad", ["not JSON", "line 1, column 2"]), ("[1]", ["not a plan"]),
    (json.dumps({"run_id": "a", "controller": {}, "roles": [], "run_dir": "/x", "config": {"runn": 1}}),
     ["runn"]),
])
def test_node_with_a_missing_or_malformed_plan_is_one_line(tmp_path, capsys, content, words):
    plan = tmp_path / "plan.json"
    if content is not None:
        plan.write_text(content)
    refused(capsys, "node", f"plan={plan}", "node_rank=0", words=(str(plan), *words))


# ---- run directories -------------------------------------------------------------------
def finished_run(path: Path) -> dict:
    """What a run with run.checkpoint_every_steps=0 leaves: no step checkpoint to resume."""
    (path / "checkpoints" / "final").mkdir(parents=True)
    (path / "checkpoints" / "final" / "config.json").write_text("{}")
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 7)))
    (path / "summary.json").write_text('{"steps": 6}')
    (path / "config.yaml").write_text("run: {}\n")
    return {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_resume_auto_on_a_finished_run_without_a_checkpoint_is_refused_and_loses_nothing(tmp_path, capsys, no_launch):
    # before: exit 0 after a fresh run in place: metrics.jsonl went from 6 lines to 2
    run = tmp_path / "run"
    before = finished_run(run)
    refused(capsys, "train", f"run.dir={run}", "run.resume=auto", "run.checkpoint_every_steps=0",
            words=(f"no checkpoint to resume in {run}", "newest files", "metrics.jsonl"))
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("exists", [False, True])
def test_resume_auto_on_a_missing_or_empty_directory_starts_fresh_and_says_so(tmp_path, exists):
    run = tmp_path / "run"
    if exists:
        run.mkdir()
    cfg = load_config("cpu_tiny", [f"run.dir={run}", "run.resume=auto"])
    said = []
    assert resolve_run_dir(cfg, log=said.append) == str(run) and cfg.run.resume == ""
    assert len(said) == 1 and "starting a fresh run" in said[0] and str(run) in said[0]


def test_without_resume_an_existing_run_directory_is_never_written_into(tmp_path):
    run = tmp_path / "run"
    finished_run(run)
    assert resolve_run_dir(load_config("cpu_tiny", [f"run.dir={run}"])) == f"{run}-2"


def test_a_run_directory_in_use_is_refused_naming_the_holders_pid(tmp_path, capsys, no_launch):
    run = tmp_path / "run"  # before: two runs interleaved metrics.jsonl and both wrote step_65
    finished_run(run)
    with run_lock.acquire(str(run)):
        refused(capsys, "train", f"run.dir={run}", "run.resume=auto",
                words=(f"run.dir={run} is in use", f"pid {os.getpid()}"))
    assert not (run / "plan.json").exists()


def test_the_controller_itself_refuses_a_locked_run_directory(tmp_path):
    from llamarl_core.config.errors import ConfigError
    from llamarl_core.plan.plan import make_plan
    from llamarl_core.runtime.controller import Controller

    cfg = load_config("cpu_tiny", [f"run.dir={tmp_path}"])
    with run_lock.acquire(str(tmp_path)):
        with pytest.raises(ConfigError, match=f"pid {os.getpid()}"):
            Controller(cfg, make_plan(cfg, run_dir=str(tmp_path)), str(tmp_path)).run()
    assert sorted(os.listdir(tmp_path)) == [run_lock.LOCK_FILE]  # no plan.json, no store, no role
    run_lock.acquire(str(tmp_path)).release()  # released on exit


def test_plan_out_and_node_0_refuse_a_directory_holding_a_finished_run(tmp_path, capsys):
    run = tmp_path / "run"
    before = finished_run(run)
    refused(capsys, "plan", "--out", str(run), words=(f"{run} already holds a run", "run.resume=auto"))
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_resume_refuses_a_checkpoint_with_a_planted_pickle_before_launch(tmp_path, capsys, no_launch):
    # before: the payload ran when the trainer read rng/rank_0.pt
    run, marker = tmp_path / "run", tmp_path / "ran"
    model = Llama(TINY)
    opt = torch.optim.AdamW(model.parameters())
    path = run / "checkpoints" / "step_5"
    checkpoints.save(str(path), model, opt, None, 0, {"step": 5, "next_chunk": {}, "dropped": {}}, 2, str(run))
    (path / "rng" / "rank_0.json").write_bytes(pickle.dumps(_Payload(marker)))
    refused(capsys, "train", f"run.dir={run}", "run.resume=auto",
            words=("run.resume: refusing checkpoint", "rank_0.json"))
    assert not marker.exists() and not (run / "plan.json").exists()


class _Payload:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_dead_ranks_log_tail_is_its_last_lines_not_its_metrics(tmp_path):
    log = tmp_path / "trainer_0.log"
    log.write_text("resumed from x\nTraceback: boom\n" + "".join(json.dumps({"step": s}) + "\n" for s in range(30)))
    assert procs.tail(str(log)) == "resumed from x\nTraceback: boom"


def test_the_signal_that_killed_a_rank_is_read_from_its_torchrun_log(tmp_path):
    log = tmp_path / "trainer.torchrun.log"
    log.write_text("E1201 api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 4242) of binary: python\n")
    assert procs.exit_cause(str(log), 4242, wait_s=0) == "killed by SIGKILL"
    assert procs.exit_cause(str(log), 4243, wait_s=0) == ""


def test_a_failed_run_prints_the_resume_command_when_a_stable_checkpoint_exists(tmp_path, capsys, monkeypatch):
    from rich.console import Console

    from llamarl_core.runtime import resume
    monkeypatch.setattr(resume, "verify", lambda path: None)  # a marker-only checkpoint passes here

    from llamarl_cli.train_cmd import report, resume_command
    from llamarl_core.runtime.controller import RunResult

    (tmp_path / "checkpoints" / "step_5").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_5" / checkpoints.STABLE).write_text("5\n")
    cmd = resume_command("cpu_tiny", ["run.max_steps=9", f"run.dir={tmp_path}"], str(tmp_path))
    assert cmd == f"llamarl train recipe=cpu_tiny run.max_steps=9 run.dir={tmp_path} run.resume=auto"
    result = RunResult(False, str(tmp_path), "role trainer rank 0 (pid 7) was killed by SIGKILL")
    assert report(result, Console(file=open(os.devnull, "w")), cmd) == 1
    assert cmd in capsys.readouterr().err
