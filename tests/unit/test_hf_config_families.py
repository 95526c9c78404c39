"""config.json of every family: what is read (against transformers' own defaults), what is
refused before any process starts (the field and its value named), and the parameter counts
the planner uses (exact against the module; published sizes within 0.5%)."""
import json

import pytest
import torch

from llamarl_core.models import Llama, load_pretrained, save_pretrained
from llamarl_core.models.hf_config import UnsupportedCheckpoint, args_from_hf_config

transformers = pytest.importorskip("transformers")

from hf_tiny import save_tiny, tiny_config  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(family: str, **changes) -> dict:
    return {**tiny_config(family).to_dict(), **changes}


@pytest.mark.parametrize("family,changes,field,value", [
    ("mistral", {"sliding_window": 64}, "sliding_window", "64"),
    ("qwen2.5", {"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 1, "layer_types": None},
     "use_sliding_window", "true"),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 64,
               "layer_types": ["full_attention", "sliding_attention"]}, "layer_types", "sliding_attention"),
    ("qwen2.5", {"model_type": "qwen2_moe"}, "model_type", "qwen2_moe"),
    ("mistral", {"model_type": "mixtral", "num_local_experts": 8}, "model_type", "mixtral"),
    ("qwen2.5", {"num_experts": 8}, "num_experts", "8"),
    ("llama3", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
     "rope_parameters.rope_type", "yarn"),
    ("llama3", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_scaling.rope_type", "dynamic"),
    ("llama3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope_parameters.rope_type",
     "longrope"),
    ("qwen3", {"partial_rotary_factor": 0.5}, "partial_rotary_factor", "0.5"),
    ("llama3", {"final_logit_softcapping": 30.0}, "final_logit_softcapping", "30.0"),
    ("llama3", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping", "50.0"),
    ("mistral", {"hidden_act": "gelu"}, "hidden_act", "gelu"),
    ("llama3", {"attention_bias": True}, "attention_bias", "true"),
    ("qwen3", {"attention_bias": True}, "attention_bias", "true"),
    ("llama3", {"mlp_bias": True}, "mlp_bias", "true"),
    ("qwen2.5", {"attention_dropout": 0.1}, "attention_dropout", "0.1"),
    ("llama3", {"quantization_config": {"quant_method": "gptq", "bits": 4}}, "quantization_config.quant_method",
     "gptq"),
    ("smollm2", {"architectures": ["LlamaForSequenceClassification"]}, "architectures", "SequenceClassification"),
])
def test_features_we_do_not_compute_are_refused_naming_the_field_and_value(family, changes, field, value):
    with pytest.raises(UnsupportedCheckpoint) as err:
        args_from_hf_config(_config(family, **changes), source="ckpt/config.json")
    assert err.value.field == field
    assert str(err.value).startswith(f"ckpt/config.json: {field}=") and value in str(err.value)


@pytest.mark.parametrize("family,changes", [
    ("qwen2.5", {"use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 21}),  # Qwen2.5-7B
    ("qwen2.5", {"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 2, "layer_types": None}),
    ("mistral", {"sliding_window": 128}),  # as long as max_position_embeddings: never slides
    ("mistral", {"sliding_window": None}),
    ("llama3", {"sliding_window": 16}),  # LlamaAttention never reads it
])
def test_a_sliding_window_that_never_applies_is_accepted(family, changes):
    assert args_from_hf_config(_config(family, **changes)).n_layers == 2


def test_missing_keys_take_the_family_defaults_transformers_uses():
    cfg = _config("qwen3")
    del cfg["head_dim"]  # Qwen3Config: 128, not hidden_size / heads
    assert args_from_hf_config(cfg).head_dim == 128 == transformers.Qwen3Config(**cfg).head_dim
    mistral = _config("mistral")
    del mistral["sliding_window"]  # MistralConfig: 4096, which is in use at 32k positions
    mistral["max_position_embeddings"] = 32768
    with pytest.raises(UnsupportedCheckpoint, match="sliding_window=4096"):
        args_from_hf_config(mistral)
    llama2 = {k: v for k, v in _config("smollm2").items() if k not in ("rope_parameters", "num_key_value_heads")}
    args = args_from_hf_config(llama2)  # Llama-2 style: no GQA key, no RoPE keys at all
    assert (args.n_kv_heads, args.rope_theta, args.rope_scaling) == (4, 10000.0, None)


@pytest.mark.parametrize("family,rope", [("smollm2", {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}),
                                         ("smollm2", None)])
def test_linear_rope_and_llama2_style_checkpoints_match_transformers(tmp_path, family, rope):
    overrides = {"rope_parameters": rope} if rope else {"num_key_value_heads": 4}
    path = save_tiny(family, tmp_path, **overrides)
    ours, tokenizer = load_pretrained(path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(0, 259, (2, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (ours(ids) - hf(ids).logits).abs().max() <= 1e-5
    save_pretrained(ours, tokenizer, tmp_path / "export")  # and the export says the same RoPE
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(back(ids).logits, hf(ids).logits)


def test_llamarl_plan_exits_2_naming_the_field_before_anything_starts(tmp_path, capsys):
    from llamarl_cli.main import main

    path = save_tiny("mistral", tmp_path / "m", sliding_window=64)
    capsys.readouterr()
    code = main(["plan", f"model.checkpoint={path}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"model.checkpoint={path}" in err and "sliding_window=64" in err


# Published sizes (config.json of the public checkpoints) and their parameter counts: the sizes
# every family has, in SIZES order, then the keys only some have.
SIZES = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "vocab_size")
PUBLISHED = {name: (dict(zip(SIZES, sizes)) | more, params) for name, sizes, more, params in [
    ("Qwen2.5-7B", ("qwen2", 3584, 18944, 28, 28, 4, 152064), {"tie_word_embeddings": False}, 7.62e9),
    ("Qwen2.5-0.5B", ("qwen2", 896, 4864, 24, 14, 2, 151936), {"tie_word_embeddings": True}, 0.494e9),
    ("Qwen3-8B", ("qwen3", 4096, 12288, 36, 32, 8, 151936), {"head_dim": 128, "tie_word_embeddings": False}, 8.19e9),
    ("Qwen3-0.6B", ("qwen3", 1024, 3072, 28, 16, 8, 151936), {"head_dim": 128, "tie_word_embeddings": True}, 0.596e9),
    ("Mistral-7B-v0.3", ("mistral", 4096, 14336, 32, 32, 8, 32768), {"sliding_window": None}, 7.25e9),
    ("SmolLM2-135M", ("llama", 576, 1536, 30, 9, 3, 49152), {"tie_word_embeddings": True}, 0.1348e9),
]}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_num_params_and_param_shapes_are_exact_for_every_family(name):
    cfg, published = PUBLISHED[name]
    args = args_from_hf_config(cfg)
    with torch.device("meta"):
        model = Llama(args)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert args.param_shapes() == shapes and list(args.param_shapes()) == list(shapes)
    assert args.num_params() == sum(p.numel() for p in model.parameters())
    assert abs(args.num_params() - published) / published < 0.005
    two_layers = {**cfg, "num_hidden_layers": 2}  # transformers' own module, at 2 of the layers
    with torch.device("meta"):
        reference = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**two_layers))
    assert args_from_hf_config(two_layers).num_params() == sum(p.numel() for p in reference.parameters())
