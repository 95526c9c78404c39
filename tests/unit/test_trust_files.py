"""Files, parsers and disks cannot hang the CLI, leak a secret or end in a traceback (#44,
cases 11 and the weak list: secrets on disk, ENOSPC, read-only run dir, torn metrics line,
truncated checkpoint, `report` on junk).

Each case failed on the code before it; what happened then is in its comment.
"""
import os
import time

import pytest

from llamarl_cli.main import main


def refused(capsys, *argv, words=()):
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    for w in words:
        assert w in err, err
    return err


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
    from llamarl_core.config.load import list_recipes, refuse_aliases, resolve_recipe_path
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
