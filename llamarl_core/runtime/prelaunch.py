"""Checks the controller runs before any role starts: each ends the run with exit 2 (a
ConfigError naming the key and the file) instead of a role failing after launch.

`llamarl_core.plan` already refused what the config alone shows (layouts, lengths against the
model's positions, trainer ranks against prompts, CPU processes, memory); what needs files is
here: the model checkpoint's weights against its config.json (headers only, no weight read).
"""
from __future__ import annotations

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig


def check_before_launch(cfg: LlamaRLConfig) -> None:
    check_model_files(cfg)
    check_export_dtype(cfg)


def check_model_files(cfg: LlamaRLConfig) -> None:
    from llamarl_core.models.checkpoint_check import check_checkpoint

    if not cfg.model.checkpoint:
        return
    try:
        check_checkpoint(cfg.model.checkpoint)
    except (ValueError, KeyError, FileNotFoundError, OSError) as e:
        text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise ConfigError(f"model.checkpoint={cfg.model.checkpoint}: {text}") from None


def check_export_dtype(cfg: LlamaRLConfig) -> None:
    """export.dtype=auto reads the checkpoint's own dtype at the end of the run: read it now."""
    from llamarl_core.models.export import source_dtype

    if cfg.export.dtype != "auto":
        return
    try:
        source_dtype(cfg.model.checkpoint)
    except (ValueError, OSError) as e:
        raise ConfigError(f"export.dtype=auto: {e}") from None
