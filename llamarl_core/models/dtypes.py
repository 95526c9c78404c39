"""The config's dtype names as torch dtypes (the names themselves: config/choices.py)."""
from __future__ import annotations

import torch

from llamarl_core.config.choices import DTYPES

TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}
