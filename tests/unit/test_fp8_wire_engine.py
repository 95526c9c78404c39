"""fp8 on the wire, generator side: an engine built from the fp8 weights and scales that arrived
computes exactly what an engine quantizing the trainer's weights itself computes (CPU emulates
the fp8 GEMM by dequantizing)."""
import torch

from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.fp8_weights import bind, engine_quantizes, release_full_precision, wire_params
from llamarl_core.models.args import ModelArgs
from llamarl_core.models.llama import Llama
from llamarl_core.models.tokenizer import ByteTokenizer
from llamarl_core.transport.ddma_plan import fp8_rows, scale_name

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64)


def _model(seed: int) -> Llama:
    torch.manual_seed(seed)
    return Llama(ARGS).requires_grad_(False)


def _engine(model) -> GenerationEngine:
    return GenerationEngine(model, ByteTokenizer(), max_batch_size=4, max_seq_len=40, quantization="fp8")


def test_only_the_blocks_linears_travel_as_fp8():
    names = [n for n, _ in _model(0).named_parameters()]
    assert {n for n in names if engine_quantizes(n)} == {
        f"layers.{i}.{m}.weight" for i in range(2)
        for m in ("attention.wq", "attention.wk", "attention.wv", "attention.wo",
                  "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")}


def test_an_engine_fed_fp8_from_the_wire_equals_one_that_quantized_the_trainers_weights():
    trainer, generator = _model(1), _model(2)  # the generator starts from other weights
    received = wire_params(dict(generator.named_parameters()))
    for name, w in trainer.named_parameters():  # what the DDMA receiver leaves in place
        if engine_quantizes(name):
            q, s = fp8_rows(w.detach(), torch.float32)  # the sender's quantization
            received[name].copy_(q)
            received[scale_name(name)].copy_(s)
        else:
            received[name].data.copy_(w)
    fed = _engine(generator)
    release_full_precision(generator)  # the engine must not need the generator's own linears
    bind(fed, generator, received)
    fed.refresh_weights()
    reference = _engine(trainer)
    reference.refresh_weights()
    for key, proj in reference.weights.proj.items():
        if key == "output":
            continue
        mine = fed.weights.proj[key].quantized
        assert torch.equal(mine.q.view(torch.uint8), proj.quantized.q.view(torch.uint8)), key
        assert torch.equal(mine.scale, proj.quantized.scale), key
    prompts = [[1, 40, 41, 42], [1, 50, 51]]
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    assert [c.token_ids for c in fed.generate(prompts, params)] == \
        [c.token_ids for c in reference.generate(prompts, params)]
