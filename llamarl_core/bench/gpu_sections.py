"""The sections of `scripts/gpu_check.py`: each measures one GPU path and judges it.

A section returns its numbers, `thresholds` (each check as text: `"engine_over_transformers >= 1.0"`)
and `checks` (each one's outcome); `judge` turns them into the section's `verdict`
("pass" | "fail" | "skip"). The driver runs each section in a subprocess of its own under its
own timeout. Sizes per device are in bench/gpu_sizes.py.
"""
from __future__ import annotations

import math
import operator
import tempfile
import time

import torch

from llamarl_core.bench.provenance import machine

OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "==": operator.eq}

def judge(out: dict, checks: dict[str, tuple]) -> dict:
    """`checks`: name → (value, op, threshold). Writes each threshold beside the numbers."""
    out["thresholds"] = {k: f"{k} {op} {thr}" for k, (_, op, thr) in checks.items()}
    out["checks"] = {k: bool(v is not None and not (isinstance(v, float) and math.isnan(v)) and OPS[op](v, thr))
                     for k, (v, op, thr) in checks.items()}
    out["verdict"] = "pass" if all(out["checks"].values()) else "fail"
    return out


def skip(reason: str, **numbers) -> dict:
    return {"verdict": "skip", "reason": reason, **numbers}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def tiny_args():
    from llamarl_core.models.args import BYTE_VOCAB_SIZE, ModelArgs
    return ModelArgs(vocab_size=BYTE_VOCAB_SIZE, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
                     rope_theta=10000.0, max_seq_len=128)


def model_for(device: str, size: dict, dtype: str | None = None):
    from llamarl_core.models import ByteTokenizer, Llama, get_preset
    args = get_preset(size["preset"]) if size["preset"] else tiny_args()
    torch.manual_seed(0)
    model = Llama(args).to(device=device, dtype=getattr(torch, dtype or size["dtype"])).eval()
    return model, ByteTokenizer()


def hf_copy(model, tokenizer, device: str, dtype: torch.dtype):
    """transformers' LlamaForCausalLM holding exactly our weights (through a saved checkpoint)."""
    import transformers

    from llamarl_core.models import save_pretrained
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tokenizer, tmp)
        return transformers.LlamaForCausalLM.from_pretrained(tmp, torch_dtype=dtype).to(device).eval()


# ---- sections -----------------------------------------------------------------------------
def env(device: str, size: dict) -> dict:
    out = {**machine(), "cuda_available": torch.cuda.is_available()}
    try:  # the version without the seconds an import takes
        from importlib.metadata import PackageNotFoundError, version
        out["transformers"] = version("transformers")
    except PackageNotFoundError:
        out["transformers"] = None
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(cuda=torch.version.cuda, nccl=".".join(map(str, torch.cuda.nccl.version())),
                   device_name=props.name, device_count=torch.cuda.device_count(),
                   memory_gib=round(props.total_memory / 2**30, 1),
                   capability=list(torch.cuda.get_device_capability(0)))
    return judge(out, {"cuda_available": (out["cuda_available"], "==", True)} if device == "cuda"
                 else {"transformers_installed": (out["transformers"] is not None, "==", True)})


def logits_parity(device: str, size: dict) -> dict:
    model, tok = model_for(device, size)
    hf = hf_copy(model, tok, device, getattr(torch, size["dtype"]))
    ids = torch.randint(0, model.args.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        ours, ref = model(ids).float(), hf(ids).logits.float()
    diff = (ours - ref).abs()
    out = {"dtype": size["dtype"], "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
           "logit_scale": float(ref.abs().mean()),
           "argmax_agreement": float((ours.argmax(-1) == ref.argmax(-1)).float().mean())}
    out["mean_abs_diff_over_scale"] = out["mean_abs_diff"] / max(out["logit_scale"], 1e-12)
    if size["dtype"] == "float32":  # same function, same weights: float noise only
        return judge(out, {"max_abs_diff": (out["max_abs_diff"], "<=", 1e-4),
                           "argmax_agreement": (out["argmax_agreement"], "==", 1.0)})
    return judge(out, {"mean_abs_diff_over_scale": (out["mean_abs_diff_over_scale"], "<=", 0.02),
                       "argmax_agreement": (out["argmax_agreement"], ">=", 0.97)})


def _prompts(size: dict, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(2)
    return torch.randint(4, vocab, (size["batch"], size["prompt_tokens"]), generator=g).tolist()


def _engine_tokens_per_s(engine, prompts, new_tokens: int, device: str) -> float:
    from llamarl_core.generation import SamplingParams
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    sync(device)
    t0 = time.perf_counter()
    out = engine.stream(prompts, params, seed=0)
    sync(device)
    return sum(d.token_ids.numel() for d in out) / (time.perf_counter() - t0)


def _hf_tokens_per_s(hf, prompts, new_tokens: int, device: str) -> float:
    ids = torch.tensor(prompts, device=device)  # equal lengths: no padding needed
    sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, pad_token_id=0)
    sync(device)
    return (out.shape[1] - ids.shape[1]) * ids.shape[0] / (time.perf_counter() - t0)


def generation(device: str, size: dict, rounds: int = 3) -> dict:
    """Decode tokens/s of our engine vs `transformers.generate`, same weights and batch, greedy,
    alternating so machine noise hits both alike."""
    from llamarl_core.generation import GenerationEngine
    model, tok = model_for(device, size)
    hf = hf_copy(model, tok, device, getattr(torch, size["dtype"]))
    engine = GenerationEngine(model, tok, max_batch_size=size["batch"])
    prompts, n = _prompts(size, model.args.vocab_size), size["new_tokens"]
    _engine_tokens_per_s(engine, prompts[:2], 2, device), _hf_tokens_per_s(hf, prompts[:2], 2, device)  # warm-up
    ours, ref = [], []
    for _ in range(rounds):
        ours.append(_engine_tokens_per_s(engine, prompts, n, device))
        ref.append(_hf_tokens_per_s(hf, prompts, n, device))
    out = {"batch": size["batch"], "new_tokens": n, "dtype": size["dtype"],
           "engine_tokens_per_s": round(max(ours), 1), "transformers_tokens_per_s": round(max(ref), 1),
           "engine_over_transformers": round(max(ours) / max(ref), 3)}
    return judge(out, {"engine_over_transformers": (out["engine_over_transformers"], ">=", 1.0)})


def fp8(device: str, size: dict) -> dict:
    if device != "cuda":
        return skip("fp8 e4m3 via torch._scaled_mm needs a CUDA GPU")
    from llamarl_core.generation import GenerationEngine
    from llamarl_core.generation.quant import next_token_kl, quantize_model
    model, tok = model_for(device, size)
    quantized = quantize_model(model, "fp8")
    ids = torch.tensor(_prompts(size, model.args.vocab_size)[:8], device=device)
    kl = next_token_kl(model, quantized, ids)
    prompts, n = _prompts(size, model.args.vocab_size), size["new_tokens"]
    bf16, q8 = GenerationEngine(model, tok, size["batch"]), GenerationEngine(model, tok, size["batch"], quantization="fp8")
    _engine_tokens_per_s(q8, prompts[:2], 2, device)
    speeds = {"bf16": [], "fp8": []}
    for _ in range(3):
        speeds["bf16"].append(_engine_tokens_per_s(bf16, prompts, n, device))
        speeds["fp8"].append(_engine_tokens_per_s(q8, prompts, n, device))
    out = {"scaled_mm": all(q.use_scaled_mm for q in quantized.values()), "next_token_kl_vs_bf16": kl,
           "bf16_tokens_per_s": round(max(speeds["bf16"]), 1), "fp8_tokens_per_s": round(max(speeds["fp8"]), 1),
           "fp8_over_bf16": round(max(speeds["fp8"]) / max(speeds["bf16"]), 3)}
    return judge(out, {"scaled_mm": (out["scaled_mm"], "==", True), "next_token_kl_vs_bf16": (kl, "<=", 0.05),
                       "fp8_over_bf16": (out["fp8_over_bf16"], ">=", 0.9)})
