"""Our LoRA against PEFT's on the same weights: the arithmetic, and adapter files both ways.

The reference is `peft` itself on transformers' own model: a tiny random Llama-3.1 saved by
transformers (hf_tiny), loaded by ours through `load_pretrained`. Adapters are non-zero (B is
zero at init, which would hide a wrong scale, a swapped A/B or a wrong module mapping).
"""
import json

import pytest
import torch

from hf_tiny import save_tiny
from llamarl_core.config.schema import LoraConfig
from llamarl_core.models import load_pretrained
from llamarl_core.models.lora import apply_lora, is_adapter
from llamarl_core.models.peft_io import load_adapter, peft_key, read_adapter, save_adapter

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

IDS = torch.randint(0, 259, (2, 20), generator=torch.Generator().manual_seed(3))
LORA = LoraConfig(rank=4, alpha=12.0, target_modules=["wq", "wv", "wo", "w2", "w3"])  # s = 3


def _ours(src, lora=LORA, seed=0):
    """Our model on the source's weights with LoRA on `lora`'s targets and random non-zero A and B."""
    model, _ = load_pretrained(src)
    apply_lora(model.eval(), lora.rank, lora.scale, lora.target_modules, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def _adapters(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if is_adapter(n)}


def _peft_config(lora=LORA):
    hf_names = {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj", "w1": "gate_proj",
                "w2": "down_proj", "w3": "up_proj"}
    return peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                           target_modules=[hf_names[t] for t in lora.target_modules])


def _hf(src):
    return transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return save_tiny("llama3", tmp_path_factory.mktemp("src"))


def test_our_lora_layer_computes_what_peft_computes_on_the_same_adapters(src):
    ours = _ours(src)
    theirs = peft.get_peft_model(_hf(src), _peft_config()).eval()
    result = peft.set_peft_model_state_dict(theirs, {peft_key(n): t for n, t in _adapters(ours).items()})
    assert not result.unexpected_keys
    assert not [k for k in result.missing_keys if "lora_" in k]  # every PEFT adapter was set
    with torch.no_grad():
        base = _hf(src)(IDS).logits
        reference, logits = theirs(IDS).logits, ours(IDS)
    assert (reference - base).abs().max() > 1e-2  # the adapters change the output
    torch.testing.assert_close(logits, reference, atol=1e-5, rtol=0)


def test_an_adapter_we_save_loads_in_peft_with_our_logits(src, tmp_path):
    ours = _ours(src)
    out = save_adapter(ours, LORA, src, tmp_path / "adapter")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 12.0 and config["base_model_name_or_path"] == str(src)
    assert sorted(config["target_modules"]) == ["down_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    theirs = peft.PeftModel.from_pretrained(_hf(src), out).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), theirs(IDS).logits, atol=1e-5, rtol=0)
    assert not list(tmp_path.glob(".adapter.partial-*"))


def test_an_adapter_peft_saves_loads_into_ours_with_its_logits(src, tmp_path):
    donor = _ours(src, seed=7)
    theirs = peft.get_peft_model(_hf(src), _peft_config()).eval()
    peft.set_peft_model_state_dict(theirs, {peft_key(n): t for n, t in _adapters(donor).items()})
    theirs.save_pretrained(tmp_path / "peft")
    spec, tensors = read_adapter(tmp_path / "peft")
    assert (spec.rank, spec.alpha, spec.targets) == (4, 12.0, ("wq", "wv", "wo", "w2", "w3"))
    ours = _ours(src, seed=0)  # other adapters, overwritten by the load
    assert load_adapter(ours, tmp_path / "peft", LORA) == spec
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), theirs(IDS).logits, atol=1e-5, rtol=0)


def test_save_refuses_a_non_empty_directory_and_writes_nothing(src, tmp_path):
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "keep").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        save_adapter(_ours(src), LORA, src, tmp_path / "adapter")
    assert [p.name for p in tmp_path.iterdir()] == ["adapter"]


@pytest.fixture
def saved(src, tmp_path):
    return save_adapter(_ours(src), LORA, src, tmp_path / "adapter")


@pytest.mark.parametrize("field,value,message", [
    ("use_rslora", True, "use_rslora=True is not supported"),
    ("use_dora", True, "use_dora=True is not supported"),
    ("modules_to_save", ["lm_head"], "modules_to_save=\\['lm_head'\\] is not supported"),
    ("bias", "lora_only", "bias='lora_only' is not supported"),
    ("rank_pattern", {"q_proj": 8}, "rank_pattern=.* is not supported"),
    ("alpha_pattern", {"q_proj": 8}, "alpha_pattern=.* is not supported"),
    ("peft_type", "IA3", "peft_type=.IA3.; only LORA adapters"),
])
def test_an_adapter_config_we_do_not_compute_is_refused_naming_file_and_field(saved, field, value, message):
    file = saved / "adapter_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), field: value}))
    with pytest.raises(ValueError, match=f"adapter_config.json: {message}"):
        read_adapter(saved)


def _rewrite_tensors(saved, change):
    from safetensors.torch import load_file, save_file

    file = saved / "adapter_model.safetensors"
    tensors = load_file(str(file))
    change(tensors)
    save_file(tensors, str(file))


def test_a_tensor_of_the_wrong_shape_or_without_a_layer_is_refused_naming_the_key(saved):
    key = "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"
    _rewrite_tensors(saved, lambda t: t.update({key: torch.zeros(5, 64)}))
    with pytest.raises(ValueError, match=r"adapter_model.safetensors: layers.1.attention.wv.lora_A.weight "
                                         r"has shape \(5, 64\); rank 4"):
        read_adapter(saved)
    _rewrite_tensors(saved, lambda t: t.update({key: torch.zeros(4, 64),
                                                "base_model.model.lm_head.lora_A.weight": torch.zeros(4, 64)}))
    with pytest.raises(ValueError, match="'base_model.model.lm_head.lora_A.weight' is not a LoRA A/B"):
        read_adapter(saved)


def test_a_pickled_adapter_is_not_read(saved):
    (saved / "adapter_model.safetensors").rename(saved / "adapter_model.bin")
    with pytest.raises(FileNotFoundError, match="adapter_model.bin is a pickle and is not read"):
        read_adapter(saved)


@pytest.mark.parametrize("lora,message", [
    (LoraConfig(rank=8, alpha=24.0, target_modules=LORA.target_modules), "r is 4 in the adapter but 8"),
    (LoraConfig(rank=4, alpha=8.0, target_modules=LORA.target_modules), "lora_alpha is 12.0 in the adapter but 8.0"),
    (LoraConfig(rank=4, alpha=12.0, target_modules=["wq", "wv"]),
     "target_modules is wq, wv, wo, w2, w3 in the adapter but wq, wv in model.lora"),
])
def test_load_refuses_an_adapter_that_differs_from_model_lora(src, saved, lora, message):
    model = _ours(src, lora)
    before = _adapters(model)
    with pytest.raises(ValueError, match=message):
        load_adapter(model, saved, lora)
    assert all(torch.equal(before[n], t) for n, t in _adapters(model).items())  # nothing copied


def test_load_names_the_key_the_model_lacks(src, saved):
    _rewrite_tensors(saved, lambda t: [t.pop(k) for k in list(t) if ".layers.1.mlp.up_proj." in k])
    with pytest.raises(ValueError, match=r"lacks base_model.model.model.layers.1.mlp.up_proj.lora_A.weight"):
        load_adapter(_ours(src), saved, LORA)
