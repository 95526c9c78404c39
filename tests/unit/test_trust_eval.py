"""`llamarl eval` scores what it says (#44 case 2, and a planted pickle file).

Without `data.eval_path`, training splits its one file: the last `data.num_eval_examples`
rows are held out (data/splits.py: load_split). Before this fix `eval split=test` read the
whole file, so nine of the ten rows below scored were training rows and a model that
memorised them looked good.
"""
import json

from omegaconf import OmegaConf

from llamarl_cli.main import main
from llamarl_core.config.schema import LlamaRLConfig


def _rows(n):
    return [{"question": f"What is {i} plus one?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(n)]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _scored_prompts(run_dir):
    lines = (run_dir / "predictions.jsonl").read_text().splitlines()
    return [json.loads(line)["prompt"] for line in lines]


def test_eval_split_test_scores_exactly_the_rows_training_held_out(capsys, tmp_path):
    path = _jsonl(tmp_path / "all.jsonl", _rows(10))
    out_dir = tmp_path / "eval"
    code = main(["eval", "policy=reference", "data.name=gsm8k", f"data.path={path}", "data.num_eval_examples=3",
                 "split=test", f"eval.out={out_dir}", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    # By hand: 10 rows, 3 held out → rows 7, 8, 9 (the tail); rows 0-6 are training's.
    prompts = _scored_prompts(out_dir)
    assert [p.split("\n")[0] for p in prompts] == [f"What is {i} plus one?" for i in (7, 8, 9)]
    assert not any(f"What is {i} plus one?" in p for p in prompts for i in range(7))
    assert (f"eval: 3 held-out rows of {path} (split=test: the last data.num_eval_examples=3 rows, "
            "the rows training held out)") in out
    assert json.loads((out_dir / "summary.json").read_text())["n_examples"] == 3


def test_eval_of_a_runs_checkpoint_reads_that_runs_config_and_scores_its_held_out_rows(capsys, tmp_path):
    data = _jsonl(tmp_path / "all.jsonl", _rows(8))
    run = tmp_path / "run"
    (run / "checkpoints" / "final").mkdir(parents=True)
    cfg = LlamaRLConfig()
    cfg.run.dir, cfg.data.name, cfg.data.path, cfg.data.num_eval_examples = str(run), "gsm8k", str(data), 2
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    (run / "summary.json").write_text("{\"the run's\": 1}")
    code = main(["eval", f"checkpoint={run / 'checkpoints' / 'final'}", "policy=reference", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"eval: the run's config {run / 'config.yaml'}" in out
    assert f"eval: 2 held-out rows of {data}" in out
    prompts = _scored_prompts(run / "eval-test")  # beside the run's files, not over them
    assert [p.split("\n")[0] for p in prompts] == [f"What is {i} plus one?" for i in (6, 7)]
    assert (run / "summary.json").read_text() == "{\"the run's\": 1}"


def _checkpoint_with(tmp_path, *files):
    from hf_tiny import save_tiny
    path = save_tiny("smollm2", tmp_path / "ckpt")
    for name in files:
        (path / name).write_bytes(b"\x80\x04not really a pickle")
    return path


def test_a_planted_pytorch_model_bin_is_refused_in_one_line_and_never_unpickled(capsys, tmp_path):
    path = _checkpoint_with(tmp_path, "pytorch_model.bin")
    for weights in ("model.safetensors", None):  # beside safetensors, then alone
        if weights is None:
            (path / "model.safetensors").unlink()
        code = main(["eval", f"checkpoint={path}", "data=arith", "num_examples=2", f"eval.out={tmp_path / 'e'}",
                     "--no-progress"])
        _, err = capsys.readouterr()
        assert code == 2, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert (f"eval.checkpoint={path}: {path / 'pytorch_model.bin'} is a pickled weight file; llamarl never "
                "unpickles") in err


def test_eval_refuses_a_checkpoint_whose_chat_template_raises_in_one_line(capsys, tmp_path):
    from hf_tiny import save_tiny

    from llamarl_core.data.template_check import template_file
    path = save_tiny("smollm2", tmp_path / "ckpt", chat_template="{{ raise_exception('needs tools') }}")
    code = main(["eval", f"checkpoint={path}", "data=arith", "num_examples=2", f"eval.out={tmp_path / 'e'}",
                 "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"eval.checkpoint={path}: {template_file(path)}: the chat template failed: TemplateError: needs tools" in err
