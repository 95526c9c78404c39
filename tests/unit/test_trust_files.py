"""Files, parsers and disks cannot hang the CLI, leak a secret or end in a traceback (#44,
cases 11 and the weak list: secrets on disk, ENOSPC, read-only run dir, torn metrics line,
truncated checkpoint, `report` on junk).

Each case failed on the code before it; what happened then is in its comment.
"""
import os
import time

import pytest

from launch_guard import refused
from llamarl_cli.main import main


def _billion_laughs(path):
    """Nine levels of nine aliases: 9**9 'lol's once OmegaConf copies every alias."""
    lines = ["defaults:\n  - llamarl_schema\n  - _self_\n",
             'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n")
        prev = name
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("verb", ["plan", "train", "data"])
def test_a_yaml_alias_bomb_recipe_exits_2_in_seconds_naming_the_file(tmp_path, capsys, verb):
    # Before: every verb hung in OmegaConf, copying 387 million aliases.
    bomb = _billion_laughs(tmp_path / "bomb.yaml")
    start = time.monotonic()
    err = refused(capsys, verb, f"recipe={bomb}", words=[str(bomb), "line 4", "anchor 'a'"])
    assert time.monotonic() - start < 5.0, err  # a hang guard, not a speed claim


def test_an_alias_bomb_in_a_file_the_defaults_list_pulls_in_is_refused_too(tmp_path, capsys):
    _billion_laughs(tmp_path / "extra.yaml")
    recipe = tmp_path / "main.yaml"
    recipe.write_text("defaults:\n  - llamarl_schema\n  - extra\n  - _self_\n")
    refused(capsys, "plan", f"recipe={recipe}", words=[str(tmp_path / "extra.yaml"), "refused"])


def test_no_shipped_recipe_uses_anchors_or_aliases():
    from llamarl_core.config.load import list_recipes, resolve_recipe_path
    from llamarl_core.config.yaml_files import refuse_aliases
    for name in list_recipes():
        refuse_aliases(resolve_recipe_path(name))  # raises ConfigError on one


def test_an_env_secret_is_used_by_the_run_but_never_written_to_the_run_dir(tmp_path, monkeypatch, capsys):
    # Before: plan.json and config.yaml held the token itself.
    secret = "tok-h7-5ecret-0451"
    monkeypatch.setenv("H7_TEST_TOKEN", secret)
    words = ["logging.wandb_project=${oc.env:H7_TEST_TOKEN}"]
    from llamarl_core.config.load import load_config
    assert load_config("cpu_tiny", words).logging.wandb_project == secret  # the run sees it
    run_dir = tmp_path / "run"
    assert main(["plan", *words, "--out", str(run_dir)]) == 0, capsys.readouterr().err
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"plan.json", "config.yaml"}
    for p in files:
        assert secret not in p.read_text(errors="replace"), p
    for name in ("plan.json", "config.yaml"):
        assert "${oc.env:H7_TEST_TOKEN}" in (run_dir / name).read_text(), name


def test_a_worker_rebuilding_the_config_from_plan_json_resolves_the_secret_itself(tmp_path, monkeypatch):
    import json

    from omegaconf import OmegaConf

    from llamarl_core.config.schema import LlamaRLConfig
    monkeypatch.setenv("H7_TEST_TOKEN", "tok-worker")
    run_dir = tmp_path / "run"
    assert main(["plan", "logging.wandb_project=${oc.env:H7_TEST_TOKEN}", "--out", str(run_dir)]) == 0
    plan = json.loads((run_dir / "plan.json").read_text())
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LlamaRLConfig), plan["config"]))
    assert cfg.logging.wandb_project == "tok-worker"  # as runtime/worker.py rebuilds it


# ---- resume: a torn metrics line, a truncated checkpoint -----------------------------------
def _save_step(run_dir, step):
    import torch

    from llamarl_core.checkpoint import checkpoints
    from llamarl_core.models import Llama, ModelArgs
    tiny = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=128)
    model = Llama(tiny)
    path = run_dir / "checkpoints" / f"step_{step}"
    checkpoints.save(str(path), model, torch.optim.AdamW(model.parameters()), None, 0,
                     {"step": step, "next_chunk": {}, "dropped": {}}, 2, str(run_dir))
    return path


def _truncate_a_shard(path, cut_bytes=16):
    """Cut the tail of the shard: tensor data only, which the old verify (values) never read."""
    shard = next((path / "trainer").glob("*.distcp"))
    data = shard.read_bytes()
    shard.write_bytes(data[:-cut_bytes])
    return shard, len(data) - cut_bytes


def test_a_torn_last_metrics_line_is_dropped_and_said_so_not_a_crash(tmp_path):
    # Before: json.loads raised in the controller and run.resume=auto could never continue.
    import json

    from llamarl_core.runtime import resume
    path = tmp_path / "metrics.jsonl"
    torn = b'{"step": 8, "trainer/lo'
    path.write_bytes(b"".join(json.dumps({"step": s}).encode() + b"\n" for s in range(1, 8)) + torn)
    said = []
    resume.cut_jsonl(str(path), 5, said.append)
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3, 4, 5]
    assert said == [f"resume: ignored a torn last line of {path} ({len(torn)} bytes)"]


def test_a_bad_line_in_the_middle_of_metrics_is_refused_naming_the_line(tmp_path):
    from llamarl_core.config.errors import ConfigError
    from llamarl_core.runtime import resume
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ConfigError, match=r"metrics.jsonl, line 2 is not a JSON object"):
        resume.cut_jsonl(str(path), 5, print)


def test_resume_auto_skips_a_truncated_checkpoint_for_the_newest_valid_one(tmp_path):
    # Before: step_10 was chosen and the trainer failed on it after launch.
    from llamarl_core.config.schema import LlamaRLConfig
    from llamarl_core.runtime import resume
    run = tmp_path / "run"
    good = _save_step(run, 5)
    bad = _save_step(run, 10)
    shard, size = _truncate_a_shard(bad)
    cfg = LlamaRLConfig()
    cfg.run.dir, cfg.run.resume, cfg.run.max_steps = str(run), "auto", 30
    said = []
    assert resume.resolve(cfg, str(run), said.append) == str(good)
    assert len(said) == 1 and str(bad) in said[0] and f"{shard} is truncated: {size} bytes" in said[0]


def test_resuming_a_truncated_checkpoint_by_path_exits_2_before_launch(tmp_path, capsys, monkeypatch):
    from llamarl_core.runtime import procs
    monkeypatch.setattr(procs, "start_role", lambda *a, **k: pytest.fail("a role started"))
    run = tmp_path / "run"
    shard, _ = _truncate_a_shard(_save_step(run, 5))
    refused(capsys, "train", f"run.resume={run / 'checkpoints' / 'step_5'}",
            words=("run.resume: refusing checkpoint", f"{shard} is truncated"))
    assert not (run / "plan.json").exists()


def test_the_resume_hint_of_a_failed_run_names_the_newest_valid_checkpoint(tmp_path, capsys):
    # Before: the hint named the truncated step_10, which fails again.
    from rich.console import Console

    from llamarl_cli.train_cmd import report
    from llamarl_core.runtime.controller import RunResult
    run = tmp_path / "run"
    good = _save_step(run, 5)
    _truncate_a_shard(_save_step(run, 10))
    result = RunResult(False, str(run), "role trainer rank 0 (pid 7) was killed by SIGKILL")
    assert report(result, Console(file=open(os.devnull, "w")), "llamarl train run.resume=auto") == 1
    assert f"continue from {good} with:" in capsys.readouterr().err


# ---- report on junk ------------------------------------------------------------------------
@pytest.mark.parametrize("name,text,says", [
    ("metrics.jsonl", 'null\n{"step": 1}\n', "metrics.jsonl:1: a JSON NoneType, not an object"),
    ("metrics.jsonl", '{"step": "x", "trainer/loss": 1}\n', "metrics.jsonl: row 1 has step='x'"),
    ("metrics.jsonl", '{"step": 1, "wall_s": "soon"}\n', "metrics.jsonl: row 1 has wall_s='soon'"),
    ("metrics.jsonl", '{"loss": 1}\n', "metrics.jsonl: row 1 has no step"),
    ("metrics.jsonl", 'garbage\n{"step": 1}\n', "metrics.jsonl:1: not a JSON line"),
    ("summary.json", "[1, 2]", "summary.json: a JSON list, not an object"),
    ("plan.json", '{"config": {"algorithm": {"group_size": "many"}}}', "config group_size='many'"),
    ("timeline/trainer_0.jsonl", '{"role": "trainer"}\n', "trainer_0.jsonl: span 1 lacks a role"),
])
def test_report_on_junk_run_files_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys, name, text, says):
    # Before: a TypeError traceback (exit 1) from deep in the plots.
    run = tmp_path / "run"
    (run / "timeline").mkdir(parents=True)
    if name != "metrics.jsonl":
        (run / "metrics.jsonl").write_text('{"step": 1, "wall_s": 1.0}\n')
    (run / name).write_text(text)
    refused(capsys, "report", str(run), words=["llamarl report:", says])
    assert not (run / "report").exists()


# ---- disks: a read-only run dir, a full disk ---------------------------------------------
# Tests run as root, which writes through 0555; the faults are raised where the OS would
# raise them (os.open, open) for paths under one folder, and the real code runs around them.
def _fail_writes_under(monkeypatch, folder, err):
    import builtins
    real_os_open, real_open = os.open, builtins.open
    text = os.strerror(err)

    def inside(path):
        return str(path).startswith(str(folder))

    def os_open(path, flags, *a, **k):
        if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(err, text, str(path))
        return real_os_open(path, flags, *a, **k)

    def open_(file, mode="r", *a, **k):
        if inside(file) and any(c in mode for c in "wax+"):
            raise OSError(err, text, str(file))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)


@pytest.mark.parametrize("verb", ["train", "plan"])
def test_a_read_only_run_dir_is_one_line_and_exit_2_before_launch(tmp_path, capsys, monkeypatch, verb):
    # Before: a PermissionError/OSError traceback from the controller's makedirs or run lock.
    import errno

    from llamarl_core.runtime import procs
    monkeypatch.setattr(procs, "start_role", lambda *a, **k: pytest.fail("a role started"))
    ro = tmp_path / "ro"
    ro.mkdir()
    _fail_writes_under(monkeypatch, ro, errno.EROFS)
    where = ["run.dir=" + str(ro / "run")] if verb == "train" else ["--out", str(ro / "run")]
    refused(capsys, verb, *where, words=[f"run.dir {ro / 'run'}: cannot write in {ro}",
                                         "read-only file system"])
    assert list(ro.iterdir()) == []


def test_a_full_disk_while_writing_run_files_is_one_line_naming_the_path_exit_1(tmp_path, capsys, monkeypatch):
    # Before: an OSError traceback.
    import errno
    run = tmp_path / "run"
    run.mkdir()
    real_open = open

    def full_for_plan_json(file, mode="r", *a, **k):
        if str(file).endswith("plan.json") and "w" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr("builtins.open", full_for_plan_json)
    assert main(["plan", "--out", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (f"llamarl: error: no space left on device writing {run / 'plan.json'} "
                           "(free some space or point run.dir elsewhere)"), err


def test_an_env_field_the_run_changes_after_loading_is_written_as_changed(monkeypatch):
    # run.resume=${oc.env:R} with R=auto becomes the checkpoint path; writing the text back
    # would make every worker resolve 'auto' again.
    from llamarl_core.config.load import load_config
    from llamarl_core.runtime.run_dir import as_written
    monkeypatch.setenv("H7_RESUME", "auto")
    monkeypatch.setenv("H7_PROJECT", "tok-kept")
    cfg = load_config("cpu_tiny", ["run.resume=${oc.env:H7_RESUME}", "logging.wandb_project=${oc.env:H7_PROJECT}"])
    cfg.run.resume = "/runs/x/checkpoints/step_5"
    written = as_written(cfg)
    assert written["run"]["resume"] == "/runs/x/checkpoints/step_5"
    assert written["logging"]["wandb_project"] == "${oc.env:H7_PROJECT}"


def test_a_truncated_step_checkpoint_given_as_the_model_is_refused_before_launch(tmp_path):
    # Before: its shapes matched config.json, so the check passed and the load failed later.
    import torch

    from llamarl_core.models import ByteTokenizer, ModelArgs
    from llamarl_core.models.checkpoint import save_model_files
    from llamarl_core.models.checkpoint_check import check_checkpoint
    path = _save_step(tmp_path / "run", 5)
    tiny = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=128)
    save_model_files(path, tiny, ByteTokenizer(), torch.float32)
    check_checkpoint(path)  # whole: passes
    shard, size = _truncate_a_shard(path)
    with pytest.raises(ValueError, match=f"{shard} is truncated: {size} bytes"):
        check_checkpoint(path)
