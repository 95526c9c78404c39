"""generator/quant_kl: how far the quantized generator is from its full-precision weights.

Once per weight version (the first chunk generated with it), the token-level KL(p_full ||
p_quant) of next-token distributions is measured on the completions of a few rows of that
chunk: the model run twice, teacher-forced, with and without its quantized linears
(`generation.quant.next_token_kl`; per-channel scales as in the engine, whose fused copies
quantize each row identically). On the GPU the full-precision side is bf16, so this is the
fp8-to-bf16 KL the issue asks to log. Under tensor parallelism every TP rank of a replica
runs it at the same point (the forwards all-reduce); the leader publishes it.
"""
from __future__ import annotations

import torch

from llamarl_core.generation.quant import next_token_kl, quantize_model
from llamarl_core.wire.rollout import Rollout

PROBE_ROWS = 4


class QuantKL:
    def __init__(self, model, quantization: str):
        self.model, self.quantization = model, quantization
        self.version = None
        self.value: float | None = None

    def measure(self, rollout: Rollout, version: int) -> None:
        """Measure on `rollout` unless this version was measured already (or no quantization)."""
        if self.quantization == "none" or version == self.version or rollout.tokens.shape[0] == 0:
            return
        n = min(PROBE_ROWS, rollout.tokens.shape[0])
        prompt, completion = rollout.prompt_lens[:n], rollout.completion_lens[:n]  # [n]
        if int(completion.sum()) == 0:
            return
        end = int((prompt + completion).max())
        ids = rollout.tokens[:n, :end].to(self.model.tok_embeddings.weight.device)  # [n, T]
        t = torch.arange(end, device=ids.device)[None, :]  # [1, T]
        # The logits at position t predict token t + 1: completion tokens sit at [p, p + c).
        mask = (t >= (prompt - 1)[:, None].to(ids.device)) & (t < (prompt + completion - 1)[:, None].to(ids.device))
        self.value = next_token_kl(self.model, quantize_model(self.model, self.quantization), ids, mask)
        self.version = version

    def stats(self) -> dict:
        return {} if self.value is None else {"quant_kl": self.value}
