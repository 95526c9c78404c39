"""Native PyTorch generation: KV-cache engine, sampling, stop handling, quantization."""
from .engine import GenerationEngine
from . import prefill_once
from .params import Completion, Finished, SamplingParams

__all__ = ["GenerationEngine", "SamplingParams", "Completion", "Finished"]
