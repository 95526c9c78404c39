"""A refill's prefill joins the decode step (`forward.step`): one pass over the weights for the
running rows and the admitted prompts together, with what separate calls would give."""
import pytest
import torch

from llamarl_core.generation import GenerationEngine, SamplingParams, scheduler
from llamarl_core.generation.forward import SlotCache, decode, prefill, step
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

TOK = ByteTokenizer()
LLAMA = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                  max_seq_len=96, rope_theta=10000.0)
# Qwen3-like: per-head q/k norms and a head_dim that is not dim / heads
QWEN3 = ModelArgs(vocab_size=260, dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=80,
                  max_seq_len=96, rope_theta=10000.0, decoupled_head_dim=16, qk_norm=True, family="qwen3")


def _model(args, seed=0):
    torch.manual_seed(seed)
    return Llama(args).eval().requires_grad_(False)


@pytest.mark.parametrize("args", [LLAMA, QWEN3], ids=["llama", "qwen3"])
@pytest.mark.parametrize("start", [0, 5])
def test_one_step_over_both_kinds_equals_a_decode_and_a_prefill(args, start):
    model = _model(args)
    engine = GenerationEngine(model, TOK, max_batch_size=6)
    engine.refresh_weights()
    g = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        caches = [SlotCache(model, 6, 40) for _ in range(2)]
        # slots 0..2 hold 12 tokens each (decoding at positions 9..11); slots 4, 5 get new prompts
        history = torch.randint(0, 256, (3, 12), generator=g)
        for c in caches:
            prefill(model, engine.proj, c, history, torch.tensor([10, 11, 12]), torch.arange(3))
            if start:  # the new prompts' shared prefix is in their slots already
                prefix = torch.randint(0, 256, (1, start), generator=torch.Generator().manual_seed(2))
                prefill(model, engine.proj, c, prefix.expand(2, start), torch.tensor([start] * 2),
                        torch.tensor([4, 5]))
        tokens, positions = torch.randint(0, 256, (4,), generator=g), torch.tensor([10, 11, 12, 3])
        ids, lengths = torch.randint(0, 256, (2, 7), generator=g), torch.tensor([7, 4])
        slots = torch.tensor([4, 5])
        # slot 3 is free: a scratch row of the decode batch, as the scheduler runs it
        want_d = decode(model, engine.proj, caches[0], tokens, positions, span=13)
        want_p = prefill(model, engine.proj, caches[0], ids, lengths, slots, start=start)
        got_d, got_p = step(model, engine.proj, caches[1], decode_rows=(tokens, positions, 13),
                            prefill_rows=(ids, lengths, slots, start))
    torch.testing.assert_close(got_d[:3], want_d[:3], atol=1e-5, rtol=0)
    torch.testing.assert_close(got_p, want_p, atol=1e-5, rtol=0)
    for a, b in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v):
        torch.testing.assert_close(a[:3, :, :13], b[:3, :, :13], atol=1e-5, rtol=0)
        torch.testing.assert_close(a[4:, :, :start + 7], b[4:, :, :start + 7], atol=1e-5, rtol=0)


def _steps(monkeypatch) -> list[tuple[int, int]]:
    """(decode rows, prefill rows) of every forward.step the scheduler runs itself."""
    calls = []
    original = scheduler.step

    def spy(model, proj, cache, decode_rows=None, prefill_rows=None):
        calls.append((0 if decode_rows is None else decode_rows[0].shape[0],
                      0 if prefill_rows is None else prefill_rows[0].shape[0]))
        return original(model, proj, cache, decode_rows=decode_rows, prefill_rows=prefill_rows)
    monkeypatch.setattr(scheduler, "step", spy)
    return calls


# A long shared start and short prompts mixed: refills admit prompts while others decode, some
# of them several at once that share a prefix (prefilled in a separate call first), into
# slots whose last occupant was short (its scratch position lies inside the new prefix).
SYSTEM = "a system turn shared by all: "
PROMPTS = [TOK.encode(t, add_bos=True) for t in
           ["q", "ab", "x", SYSTEM + "12+3=", SYSTEM + "7*8=", "y", SYSTEM + "9-4=", SYSTEM + "1+1="] * 4]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fused_refills_sample_what_a_separate_prefill_samples(temperature, monkeypatch):
    model = _model(LLAMA, 3)
    params = SamplingParams(max_new_tokens=16, temperature=temperature,
                            stop_token_ids=tuple(range(0, 256, 3)), ignore_eos=True)
    out, calls = {}, _steps(monkeypatch)
    for fuse in (False, True):
        engine = GenerationEngine(model, TOK, max_batch_size=6, fuse_prefill=fuse)
        out[fuse] = (engine.stream(PROMPTS, params, seed=5), list(calls))
        calls.clear()
    (plain, plain_calls), (fused, fused_calls) = out[False], out[True]
    assert [f.token_ids.tolist() for f in fused] == [p.token_ids.tolist() for p in plain]
    assert [f.finish_reason for f in fused] == [p.finish_reason for p in plain]
    for f, p in zip(fused, plain):
        torch.testing.assert_close(f.logprobs, p.logprobs, atol=1e-5, rtol=0)
    joined = [c for c in fused_calls if c[0] and c[1]]
    assert len(joined) >= 5  # refills did join decode steps
    assert not any(d and p for d, p in plain_calls)
