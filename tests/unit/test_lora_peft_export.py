"""`llamarl export` of a LoRA run: its step_<N> as a PEFT adapter, or merged into the base.

The step is made as a LoRA trainer makes it: our model on a tiny random Qwen2 (q/k/v biases,
tied head) that transformers saved, LoRA applied, non-zero adapters, then DCP over
`get_state_dict(..., ignore_frozen_params=True)`: adapters and their optimizer state only,
beside config.json, the tokenizer, state.json (with `lora`) and STABLE; the run's config.yaml
two levels up names the base (`model.checkpoint`). References: `peft.PeftModel` on
transformers' model for the adapter, transformers alone for the merged directory.
"""
import json
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from omegaconf import OmegaConf
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from hf_tiny import save_tiny
from llamarl_cli.main import main
from llamarl_core.config.load import load_config
from llamarl_core.models import load_pretrained, save_model_files
from llamarl_core.models.lora import apply_lora
from llamarl_core.runtime.run_dir import as_written

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

IDS = torch.randint(0, 259, (2, 20), generator=torch.Generator().manual_seed(5))
LORA = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": ["wq", "wk", "wv", "w1", "w2"]}  # s = 2


def _run(tmp_path: Path, state_lora=True, config_lora=True):
    """(base checkpoint, run/checkpoints/step_3, our LoRA model at that step)."""
    src = save_tiny("qwen2.5", tmp_path / "src")
    model, tokenizer = load_pretrained(src)
    apply_lora(model.eval(), LORA["rank"], LORA["alpha"] / LORA["rank"], LORA["target_modules"], seed=0)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B.weight"):
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
    model(IDS).logsumexp(-1).mean().backward()
    opt.step()  # optimizer state to save beside the adapters
    run = tmp_path / "run"
    step = run / "checkpoints" / "step_3"
    save_model_files(step, model.args, tokenizer, torch.float32)
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(ignore_frozen_params=True))
    assert {k for k in msd if "lora_" not in k} <= {"output.weight"}  # adapters (and a tied head, frozen)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(step / "trainer"))
    (step / "state.json").write_text(json.dumps({"step": 3, **({"lora": LORA} if state_lora else {})}))
    (step / "STABLE").write_text("3\n")
    words = [f"model.checkpoint={src}"] + ([f"model.lora.{k}={v}" for k, v in LORA.items() if k != "target_modules"]
                                           + [f"model.lora.target_modules=[{','.join(LORA['target_modules'])}]"]
                                           if config_lora else [])
    (run / "config.yaml").write_text(OmegaConf.to_yaml(as_written(load_config("cpu_tiny", words))))
    return src, step, model


def _export(*words) -> int:
    return main(["export", *map(str, words)])


def _hf(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_a_lora_step_exports_as_a_peft_adapter_with_the_runs_logits(tmp_path):
    src, step, ours = _run(tmp_path)
    assert _export(step, tmp_path / "adapter") == 0
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (4, 8.0, str(src))
    assert sorted(config["target_modules"]) == ["down_proj", "gate_proj", "k_proj", "q_proj", "v_proj"]
    theirs = peft.PeftModel.from_pretrained(_hf(src), tmp_path / "adapter").eval()
    with torch.no_grad():
        reference, base = theirs(IDS).logits, _hf(src)(IDS).logits
        assert (reference - base).abs().max() > 1e-2  # the adapters are in
        torch.testing.assert_close(ours(IDS), reference, atol=1e-5, rtol=0)


def test_a_merged_lora_step_loads_in_transformers_with_the_runs_logits(tmp_path):
    _, step, ours = _run(tmp_path)
    assert _export(step, tmp_path / "merged", "--merged", "export.dtype=float32") == 0
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), _hf(tmp_path / "merged")(IDS).logits, atol=1e-5, rtol=0)
    assert json.loads((tmp_path / "merged" / "config.json").read_text())["model_type"] == "qwen2"


def test_the_runs_model_lora_gives_the_adapter_shape_when_state_json_does_not(tmp_path):
    src, step, ours = _run(tmp_path, state_lora=False)
    assert _export(step, tmp_path / "adapter") == 0
    theirs = peft.PeftModel.from_pretrained(_hf(src), tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), theirs(IDS).logits, atol=1e-5, rtol=0)


def test_a_step_whose_rank_and_alpha_nobody_states_is_refused(tmp_path, capsys):
    _, step, _ = _run(tmp_path, state_lora=False, config_lora=False)
    assert _export(step, tmp_path / "adapter") == 2
    assert "neither its state.json nor a run config.yaml" in capsys.readouterr().err
    assert not (tmp_path / "adapter").exists()


def test_a_peft_adapter_merges_onto_the_base_it_names_or_the_one_given(tmp_path):
    src, step, ours = _run(tmp_path)
    assert _export(step, tmp_path / "adapter") == 0
    assert _export(tmp_path / "adapter", tmp_path / "own", "--merged") == 0  # its base_model_name_or_path
    config = tmp_path / "adapter" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": "org/hub-id"}))
    assert _export(tmp_path / "adapter", tmp_path / "given", "--merged", f"model.checkpoint={src}") == 0
    with torch.no_grad():
        logits = ours(IDS)
        for out in ("own", "given"):
            torch.testing.assert_close(logits, _hf(tmp_path / out)(IDS).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("case,message", [
    ("peft_unmerged", "is a PEFT adapter already; --merged"),
    ("hub_base", "--merged needs the base model as a local Hugging Face directory, not 'org/hub-id'"),
    ("full_merged", "is a whole model already"),
])
def test_exports_that_cannot_be_made_are_refused_in_one_line(tmp_path, capsys, case, message):
    src, step, _ = _run(tmp_path)
    assert _export(step, tmp_path / "adapter") == 0
    config = tmp_path / "adapter" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": "org/hub-id"}))
    words = {"peft_unmerged": [tmp_path / "adapter", tmp_path / "out"],
             "hub_base": [tmp_path / "adapter", tmp_path / "out", "--merged"],
             "full_merged": [src, tmp_path / "out", "--merged"]}[case]
    assert _export(*words) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
