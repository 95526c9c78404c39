"""A model-only Hugging Face directory (config.json + safetensors, no tokenizer file) loads its
weights; only a use of the missing tokenizer fails, naming the files looked for."""
import pytest
import torch

from llamarl_core.models import ByteTokenizer, Llama, get_preset, load_pretrained, save_pretrained


def test_a_model_only_directory_loads_its_weights_and_the_tokenizer_fails_only_when_used(tmp_path):
    torch.manual_seed(0)
    model = Llama(get_preset("tiny-2m"))
    save_pretrained(model, ByteTokenizer(), tmp_path)
    for tokenizer_file in ("byte_tokenizer.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / tokenizer_file).unlink(missing_ok=True)
    loaded, tokenizer = load_pretrained(tmp_path)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    with pytest.raises(FileNotFoundError, match="byte_tokenizer.json or tokenizer.json"):
        tokenizer.encode("1 + 1")


def test_training_on_a_model_only_directory_is_refused_at_plan_time_naming_the_files(tmp_path):
    from llamarl_core.config.errors import ConfigError
    from llamarl_core.config.load import load_config
    from llamarl_core.plan.plan import make_plan
    save_pretrained(Llama(get_preset("tiny-2m")), ByteTokenizer(), tmp_path)
    (tmp_path / "byte_tokenizer.json").unlink()
    cfg = load_config("cpu_tiny", [f"model.checkpoint={tmp_path}"])
    make_plan(cfg, require_data=False)  # sizes only: fine
    with pytest.raises(ConfigError, match="model.checkpoint=.*byte_tokenizer.json or tokenizer.json"):
        make_plan(cfg, require_data=True)
