"""`llamarl eval`: short words, exit codes, files, and the real-data reference sanity check."""
import json

import pytest
import torch

from llamarl_cli.eval_cmd import expand_short_words, words_first
from llamarl_cli.main import main
from llamarl_core.models import ByteTokenizer, Llama, get_preset, save_pretrained, with_overrides


def run_cli(capsys, *argv):
    code = main(["eval", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_short_words_become_eval_overrides_and_the_rest_stay_hydra_overrides():
    assert expand_short_words(["checkpoint=c", "data=gsm8k", "n_samples=4", "data.path=p",
                               "resources.generator.num_devices=2"]) == [
        "eval.checkpoint=c", "eval.data=gsm8k", "eval.n_samples=4", "data.path=p",
        "resources.generator.num_devices=2"]


def test_key_value_words_after_a_flag_are_still_words():
    assert words_first(["--out", "f.json", "data=x", "--no-progress", "a=b", "--cfg", "job"]) == [
        "data=x", "a=b", "--out", "f.json", "--no-progress", "--cfg", "job"]


def test_cfg_job_shows_short_words_under_eval(capsys):
    code, out, _ = run_cli(capsys, "n_samples=4", "temperature=0.5", "--cfg", "job")
    assert code == 0 and "n_samples: 4" in out and "temperature: 0.5" in out


@pytest.mark.parametrize("argv, words", [
    (["policy=reference", "data=gsm8k"], ["grade-school-math", "data.path=", "nothing is downloaded"]),
    (["policy=reference", "data=math500"], ["prm800k", "data.path="]),
    (["policy=reference", "data=gsm8k", "data.path=/nonexistent/test.jsonl"], ["data.path", "not found"]),
    (["n_samples=4"], ["eval.n_samples=4", "temperature"]),
    (["policy=teacher"], ["eval.policy"]),
    (["data=arith"], ["eval.checkpoint is required"]),
    (["data=arith", "checkpoint=/nonexistent/ckpt"], ["eval.checkpoint=/nonexistent/ckpt", "config.json"]),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, words):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    for w in words:
        assert w in err


@pytest.mark.parametrize("name, folder", [("gsm8k", "gsm8k"), ("math500", "math500")])
def test_reference_policy_scores_every_real_test_example_correct(capsys, tmp_path, shared_data,
                                                                name, folder):
    out = tmp_path / "summary.json"
    code, stdout, err = run_cli(capsys, "policy=reference", f"data={name}",
                                f"data.path={shared_data / folder / 'test.jsonl'}", "--out", str(out),
                                f"eval.out={tmp_path / 'run'}", "--no-progress")
    assert code == 0, err
    summary = json.loads(out.read_text())
    assert summary["n_examples"] == {"gsm8k": 1319, "math500": 500}[name]
    assert summary["accuracy"] == 1.0 and summary["pass@1"] == 1.0
    assert summary["pass@k"] == {"1": 1.0} and summary["maj@k"] == {"1": 1.0}
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == summary
    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == summary["n_examples"]
    assert "accuracy (greedy)" in stdout


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    args = with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2,
                          ffn_dim=64, max_seq_len=64)
    path = tmp_path_factory.mktemp("ckpt") / "ckpt"
    save_pretrained(Llama(args), ByteTokenizer(), path)
    return path


def test_model_policy_writes_every_metric_for_every_k(capsys, tmp_path, tiny_checkpoint):
    code, _, err = run_cli(capsys, f"checkpoint={tiny_checkpoint}", "data=arith", "num_examples=3",
                           "n_samples=3", "temperature=1.0", "max_new_tokens=4",
                           f"eval.out={tmp_path}", "--no-progress")
    assert code == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["n_examples"] == 3 and s["n_samples"] == 3 and s["policy"] == "model"
    assert set(s["pass@k"]) == set(s["maj@k"]) == {"1", "2", "3"}
    preds = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert all(len(p["completions"]) == 3 and max(p["num_tokens"]) <= 4 for p in preds)


def test_a_prompt_too_long_for_the_checkpoint_is_rejected_before_loading(capsys, tmp_path,
                                                                         tiny_checkpoint):
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"id": "long-1", "prompt": "7" * 60, "answer": "7"}) + "\n")
    code, _, err = run_cli(capsys, f"checkpoint={tiny_checkpoint}", f"data={data}",
                           f"eval.out={tmp_path}", "data.reward=gsm8k")  # generic rows: no verifier of their own
    # "Question: " (10) + 60 + "\nAnswer:" (8) = 78 byte tokens >= 64
    assert code == 2 and "example long-1: prompt has 78 tokens" in err and "max_seq_len is 64" in err
