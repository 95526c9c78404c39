"""Adapter-only weight sync (executors/adapter_sync.py, generation/lora_merge.py): a generator
that builds its own base and receives only the adapters over a real DDMA pair (shm, one process,
the receiver's handshake in a thread) samples with the trainer's policy: μ = π in fp32.

The trainer's model is `apply_lora` on the seeded preset with B set by hand (non-zero), the
generator's a separately built base (same seed) whose target linears get W_base + s·B@A."""
import os
import threading
import time

import pytest
import torch
import torch.distributed as dist

from llamarl_core.config.schema import ModelConfig
from llamarl_core.executors.adapter_sync import AdapterReceiver
from llamarl_core.generation.engine import GenerationEngine
from llamarl_core.generation.lora_merge import LoraMerge, adapter_shapes, changed_projections
from llamarl_core.generation.params import SamplingParams
from llamarl_core.models.build import build_model
from llamarl_core.models.lora import apply_lora, is_adapter, lora_modules
from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
from llamarl_core.transport.ddma_plan import build_plan

RANK, SCALE, SEED = 4, 2.0, 0
PROMPTS = [[1, 72, 101, 108], [1, 87, 111], [1, 65, 66, 67, 68, 69]]

pytestmark = pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="/dev/shm is not writable here")


def _trainer(targets, b_seed: int):
    model, _ = build_model(ModelConfig(preset="tiny-2m"), dtype="float32", seed=SEED)
    apply_lora(model, RANK, SCALE, targets, seed=SEED)
    g = torch.Generator().manual_seed(b_seed)
    with torch.no_grad():
        for _, m in lora_modules(model):  # a trained B: non-zero, so the merge matters
            m.lora_B.weight.copy_(torch.randn(m.lora_B.weight.shape, generator=g) * 0.05)
    return model


def _adapters(model) -> dict[str, torch.Tensor]:
    return {n: p.detach() for n, p in model.named_parameters() if is_adapter(n)}


class _Pair:
    """A trainer's DdmaSender and a generator's AdapterReceiver over shm, planned on the adapters."""

    def __init__(self, generator_model, targets, quantization="none"):
        shapes = adapter_shapes(generator_model, RANK, targets, torch.float32)
        plan = build_plan(shapes, trainer_ranks=1, generator_ranks=1, dtype=torch.float32)
        kw = dict(transport="shm", store=dist.HashStore(), epoch=0, timeout_s=30,
                  run_id=f"lora-sync-{os.getpid()}-{time.monotonic_ns()}")
        params = {n: torch.zeros(s, dtype=d) for n, (s, d) in shapes.items()}
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", DdmaReceiver(plan, 0, params, **kw)))
        t.start()
        self.sender = DdmaSender(plan, 0, **kw)
        t.join(30)
        self.receiver = AdapterReceiver(out["r"], LoraMerge(generator_model, targets, SCALE))

    def sync(self, trainer, version: int) -> None:
        self.sender.send(_adapters(trainer), version)
        assert self.receiver.receive().version == version

    def close(self):
        self.sender.close()
        self.receiver.close()


def _logprobs_of_sampled(trainer, engine):
    completions = engine.generate(PROMPTS, SamplingParams(max_new_tokens=16), seed=3)
    rows = [p + c.token_ids for p, c in zip(PROMPTS, completions)]
    ids = torch.zeros((len(rows), max(map(len, rows))), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
    with torch.no_grad():
        logp = torch.log_softmax(trainer(ids)[:, :-1].float(), dim=-1)  # [B, L-1, V]
    out = []
    for i, (p, c) in enumerate(zip(PROMPTS, completions)):
        assert len(c.token_ids) > 0
        pi = logp[i, len(p) - 1:len(p) - 1 + len(c.token_ids)].gather(
            -1, torch.tensor(c.token_ids)[:, None])[:, 0]  # [c]
        out.append((torch.tensor(c.logprobs), pi))
    return out


def test_after_an_adapter_sync_the_generator_samples_with_the_trainers_policy():
    targets = ["wq", "wv", "wo", "w1", "w2", "w3"]
    trainer = _trainer(targets, b_seed=1)
    base, tok = build_model(ModelConfig(preset="tiny-2m"), dtype="float32", seed=SEED)
    base.requires_grad_(False)
    engine = GenerationEngine(base, tok)
    pair = _Pair(base, targets)
    try:
        pair.sync(trainer, 0)
        engine.refresh_weights()
        for mu, pi in _logprobs_of_sampled(trainer, engine):
            assert (mu - pi).abs().max() <= 1e-5
    finally:
        pair.close()


def test_every_version_merges_from_the_base_not_from_the_previous_merge():
    targets = ["wq", "w2"]
    first, second = _trainer(targets, b_seed=1), _trainer(targets, b_seed=2)
    base, _ = build_model(ModelConfig(preset="tiny-2m"), dtype="float32", seed=SEED)
    base.requires_grad_(False)
    w0 = {n: p.detach().clone() for n, p in base.named_parameters()}
    pair = _Pair(base, targets)
    try:
        pair.sync(first, 1)
        pair.sync(second, 2)
        expected = {f"{name}.weight": m.merged_weight() for name, m in lora_modules(second)}
        for n, p in base.named_parameters():
            # exactly W_base + s·B₂@A₂ (the same float32 sum the trainer's merged_weight takes)
            assert torch.equal(p, expected.get(n, w0[n])), n
    finally:
        pair.close()


def test_an_int8_generator_requantizes_only_the_projections_the_merge_rewrote():
    targets = ["wq"]
    trainer = _trainer(targets, b_seed=1)
    base, tok = build_model(ModelConfig(preset="tiny-2m"), dtype="float32", seed=SEED)
    base.requires_grad_(False)
    engine = GenerationEngine(base, tok, quantization="int8")
    engine.changed_projections = changed_projections(base, targets)
    assert engine.changed_projections == {"0.qkv", "1.qkv", "2.qkv"}
    engine.refresh_weights()
    before = dict(engine.proj)
    pair = _Pair(base, targets)
    try:
        pair.sync(trainer, 0)
        engine.refresh_weights()
    finally:
        pair.close()
    for key, proj in engine.proj.items():
        if key.endswith(".qkv"):  # rebuilt from the merged weights
            assert proj is not before[key]
            fused = torch.cat([base.layers[int(key[0])].attention.get_submodule(m).weight
                               for m in ("wq", "wk", "wv")])  # [3·dim, dim]
            assert torch.allclose(proj.quantized.dequantized(torch.float32), fused,
                                  atol=float(fused.abs().amax()) / 127)
        else:  # wo, w13, w2, output: the very same objects
            assert proj is before[key], key
    for mu, pi in _logprobs_of_sampled(trainer, engine):  # int8 error only: close, not exact
        assert (mu - pi).abs().max() < 0.1
