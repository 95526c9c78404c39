"""Where the planner gets model sizes: a preset name, or a checkpoint's config.json."""
from __future__ import annotations

import json
import os

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import ModelConfig
from llamarl_core.models.args import PRESETS, ModelArgs


def resolve_model_args(model: ModelConfig) -> tuple[ModelArgs, str]:
    """(ModelArgs, display name); a checkpoint's config.json wins over the preset."""
    if model.checkpoint:
        path = os.path.join(model.checkpoint, "config.json")
        if not os.path.isfile(path):
            raise ConfigError(f"model.checkpoint={model.checkpoint}: no config.json there")
        try:
            from llamarl_core.models.checkpoint import model_args_from_hf_config
            with open(path) as f:
                return model_args_from_hf_config(json.load(f)), model.checkpoint
        except (ValueError, KeyError) as e:
            raise ConfigError(f"model.checkpoint: cannot read {path}: {e}") from None
    if model.preset not in PRESETS:
        raise ConfigError(f"model.preset={model.preset!r} is not one of {', '.join(PRESETS)}")
    return PRESETS[model.preset], model.preset
