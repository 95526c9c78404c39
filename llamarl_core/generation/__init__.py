"""Native PyTorch generation: KV-cache engine, sampling, stop handling, quantization."""
from .engine import GenerationEngine
from .params import Completion, Finished, SamplingParams, stop_ids

__all__ = ["GenerationEngine", "SamplingParams", "Completion", "Finished", "stop_ids"]
