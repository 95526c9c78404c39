"""Native PyTorch generation: KV-cache engine, sampling, stop handling, quantization."""
from .engine import GenerationEngine
from .params import Completion, Finished, SamplingParams

__all__ = ["GenerationEngine", "SamplingParams", "Completion", "Finished"]
