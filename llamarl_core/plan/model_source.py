"""Where the planner gets model sizes: a preset name, or a checkpoint's config.json."""
from __future__ import annotations

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import ModelConfig
from llamarl_core.models.args import PRESETS, ModelArgs
from llamarl_core.models.hf_config import args_from_hf_config, read_config
from llamarl_core.models.tokenizer import BYTE_TOKENIZER_FILE, has_tokenizer


def resolve_model_args(model: ModelConfig) -> tuple[ModelArgs, str]:
    """(ModelArgs, display name); a checkpoint's config.json wins over the preset."""
    if model.checkpoint:
        try:
            return args_from_hf_config(read_config(model.checkpoint)), model.checkpoint
        except (ValueError, KeyError, FileNotFoundError) as e:
            raise ConfigError(f"model.checkpoint={model.checkpoint}: {e}") from None
    if model.preset not in PRESETS:
        raise ConfigError(f"model.preset={model.preset!r} is not one of {', '.join(PRESETS)}")
    return PRESETS[model.preset], model.preset


def check_tokenizer(model: ModelConfig) -> None:
    """Training encodes prompts, so its checkpoint needs a tokenizer file (a model-only
    directory is fine for `llamarl plan`'s sizes and the simulator, not for a run)."""
    if model.checkpoint and not has_tokenizer(model.checkpoint):
        raise ConfigError(f"model.checkpoint={model.checkpoint}: no tokenizer there "
                          f"(expected {BYTE_TOKENIZER_FILE} or tokenizer.json / tokenizer_config.json)")
