"""Native PyTorch generation: KV-cache engine, sampling, stop handling, quantization."""
from .engine import GenerationEngine
from . import prefill_once
from .params import Completion, Finished, SamplingParams, stop_ids

__all__ = ["GenerationEngine", "SamplingParams", "Completion", "Finished", "stop_ids"]
