"""One command for a GPU: does the GPU path work here, and how fast is it?

    python scripts/gpu_check.py --out benchmarks/results/gpu_check.json        # CUDA, < 5 min
    python scripts/gpu_check.py --device cpu --out /tmp/gpu_check_cpu.json     # small, for CI

Sections (each reports {"ok": true, ...} or {"ok": false, "error": ...}; none stops the rest):
    env            torch / CUDA / NCCL versions, the device, host load
    logits_parity  our Llama vs transformers' LlamaForCausalLM, same weights (bf16 on CUDA)
    generation     engine tokens/s vs transformers.generate, greedy, same weights and batch
                   (64 on CUDA), both sides alternating; the ratio is what matters
    fp8            fp8 e4m3 weight-only (torch._scaled_mm) vs bf16: next-token KL and tokens/s
    weight_sync    GB/s between two processes: CUDA IPC on one GPU, NCCL when two are visible,
                   /dev/shm on CPU (the transports the runtime uses)
    train          an async run (CUDA: 20 steps of recipe gpu_1x) with run.weight_checksums;
                   every version the trainer sent must hash equal on the generator

Runs from a source checkout without installing it (the repository root goes on sys.path and
PYTHONPATH) and without Hydra (recipes are then read with OmegaConf alone).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

SIZES = {  # per device: model, batch, tokens; CPU sizes keep the CI test to seconds
    "cuda": dict(preset="tiny-100m", dtype="bfloat16", batch=64, prompt_tokens=32, new_tokens=128,
                 sync_mb=1024, sync_repeats=5, train_recipe="gpu_1x", train_overrides=["run.max_steps=20"]),
    "cpu": dict(preset=None, dtype="float32", batch=4, prompt_tokens=8, new_tokens=8,
                sync_mb=16, sync_repeats=3, train_recipe="cpu_tiny",
                train_overrides=["run.max_steps=2", "warmstart.steps=2", "data.num_train_examples=64",
                                 "data.num_eval_examples=4", "run.eval_every_steps=0",
                                 "generation.max_new_tokens=8", "algorithm.prompts_per_step=4",
                                 "algorithm.group_size=2", "resources.generator.max_batch_size=8"]),
}


def section(name: str, fn, *args) -> dict:
    t0 = time.time()
    try:
        out = {"ok": True, **fn(*args)}
    except Exception as e:  # noqa: BLE001 - a failing section is reported, the others still run
        out = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    out["seconds"] = round(time.time() - t0, 2)
    print(f"[{'ok' if out['ok'] else 'FAILED'}] {name} ({out['seconds']} s)"
          + ("" if out["ok"] else f": {out['error']}"), flush=True)
    return out


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _model(device: str, size: dict):
    from llamarl_core.models import ByteTokenizer, Llama, get_preset
    from llamarl_core.models.args import BYTE_VOCAB_SIZE, ModelArgs

    args = get_preset(size["preset"]) if size["preset"] else ModelArgs(
        vocab_size=BYTE_VOCAB_SIZE, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
        rope_theta=10000.0, max_seq_len=128)
    torch.manual_seed(0)
    return Llama(args).to(device=device, dtype=getattr(torch, size["dtype"])).eval(), ByteTokenizer()


def _hf_copy(model, tokenizer, device: str, dtype: torch.dtype):
    """transformers' LlamaForCausalLM holding exactly our weights (through a saved checkpoint)."""
    import transformers

    from llamarl_core.models import save_pretrained

    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tokenizer, tmp)
        return transformers.LlamaForCausalLM.from_pretrained(tmp, torch_dtype=dtype).to(device).eval()


def check_env(device: str) -> dict:
    out = {"torch": torch.__version__, "python": platform.python_version(), "cuda_available": torch.cuda.is_available(),
           "loadavg": list(os.getloadavg()), "cpu_count": os.cpu_count()}
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except ImportError:
        out["transformers"] = None
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
        props = torch.cuda.get_device_properties(0)
        out.update(cuda=torch.version.cuda, nccl=".".join(map(str, torch.cuda.nccl.version())),
                   device_name=props.name, device_count=torch.cuda.device_count(),
                   memory_gib=round(props.total_memory / 2**30, 1), capability=list(torch.cuda.get_device_capability(0)))
    return out


def check_logits_parity(device: str, size: dict) -> dict:
    model, tok = _model(device, size)
    hf = _hf_copy(model, tok, device, getattr(torch, size["dtype"]))
    ids = torch.randint(0, model.args.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        ours, ref = model(ids).float(), hf(ids).logits.float()
    diff = (ours - ref).abs()
    return {"dtype": size["dtype"], "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "logit_scale": float(ref.abs().mean()), "argmax_agreement": float((ours.argmax(-1) == ref.argmax(-1)).float().mean())}


def _prompts(size: dict, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(2)
    return torch.randint(4, vocab, (size["batch"], size["prompt_tokens"]), generator=g).tolist()


def _engine_tokens_per_s(engine, prompts, new_tokens: int, device: str) -> float:
    from llamarl_core.generation import SamplingParams

    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    _sync(device)
    t0 = time.perf_counter()
    out = engine.generate(prompts, params, seed=0)
    _sync(device)
    return sum(len(c.token_ids) for c in out) / (time.perf_counter() - t0)


def _hf_tokens_per_s(hf, prompts, new_tokens: int, device: str) -> float:
    ids = torch.tensor(prompts, device=device)  # equal lengths: no padding needed
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, pad_token_id=0)
    _sync(device)
    return (out.shape[1] - ids.shape[1]) * ids.shape[0] / (time.perf_counter() - t0)


def check_generation(device: str, size: dict, rounds: int = 3) -> dict:
    from llamarl_core.generation import GenerationEngine

    model, tok = _model(device, size)
    hf = _hf_copy(model, tok, device, getattr(torch, size["dtype"]))
    engine = GenerationEngine(model, tok, max_batch_size=size["batch"])
    prompts, n = _prompts(size, model.args.vocab_size), size["new_tokens"]
    _engine_tokens_per_s(engine, prompts[:2], 2, device), _hf_tokens_per_s(hf, prompts[:2], 2, device)  # warm-up
    ours, ref = [], []
    for _ in range(rounds):  # alternate so machine noise hits both alike
        ours.append(_engine_tokens_per_s(engine, prompts, n, device))
        ref.append(_hf_tokens_per_s(hf, prompts, n, device))
    return {"batch": size["batch"], "new_tokens": n, "dtype": size["dtype"], "engine_tokens_per_s": round(max(ours), 1),
            "transformers_tokens_per_s": round(max(ref), 1), "engine_over_transformers": round(max(ours) / max(ref), 3)}


def check_fp8(device: str, size: dict) -> dict:
    if device != "cuda":
        return {"available": False, "reason": "fp8 e4m3 via torch._scaled_mm needs a CUDA GPU"}
    from llamarl_core.generation import GenerationEngine
    from llamarl_core.generation.quant import next_token_kl, quantize_model

    model, tok = _model(device, size)
    quantized = quantize_model(model, "fp8")
    uses_scaled_mm = all(q.use_scaled_mm for q in quantized.values())
    ids = torch.tensor(_prompts(size, model.args.vocab_size)[:8], device=device)
    kl = next_token_kl(model, quantized, ids)
    prompts, n = _prompts(size, model.args.vocab_size), size["new_tokens"]
    bf16, fp8 = GenerationEngine(model, tok, size["batch"]), GenerationEngine(model, tok, size["batch"], quantization="fp8")
    _engine_tokens_per_s(fp8, prompts[:2], 2, device)
    speeds = {"bf16": [], "fp8": []}
    for _ in range(3):
        speeds["bf16"].append(_engine_tokens_per_s(bf16, prompts, n, device))
        speeds["fp8"].append(_engine_tokens_per_s(fp8, prompts, n, device))
    return {"available": True, "scaled_mm": uses_scaled_mm, "next_token_kl_vs_bf16": kl,
            "bf16_tokens_per_s": round(max(speeds["bf16"]), 1), "fp8_tokens_per_s": round(max(speeds["fp8"]), 1),
            "fp8_over_bf16": round(max(speeds["fp8"]) / max(speeds["bf16"]), 3)}


def check_weight_sync(device: str, size: dict) -> dict:
    transport = "shm" if device == "cpu" else ("collective" if torch.cuda.device_count() >= 2 else "cuda_ipc")
    with tempfile.TemporaryDirectory() as tmp:
        port, outs = _free_port(), [os.path.join(tmp, f"r{r}.json") for r in (0, 1)]
        cmd = [sys.executable, __file__, "--_sync_worker", device, transport, str(port),
               str(size["sync_mb"]), str(size["sync_repeats"])]
        procs = [subprocess.Popen(cmd + [str(r), outs[r]]) for r in (0, 1)]
        try:
            codes = [p.wait(timeout=240) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes):
            raise RuntimeError(f"weight-sync workers exited with {codes}")
        sender, receiver = (json.loads(Path(o).read_text()) for o in outs)
        return {"transport": "nccl" if transport == "collective" else transport, **sender,
                "received_equal": receiver["received_equal"]}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sync_worker(device, transport, port, size_mb, repeats, rank, out) -> None:
    """One side of the weight-sync measurement (rank 0 trainer, rank 1 generator), through the
    DDMA endpoints a run uses (transport/ddma.py): 1 trainer rank -> 1 generator rank."""
    import torch.distributed as dist

    from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
    from llamarl_core.transport.ddma_plan import build_plan

    rank, repeats = int(rank), int(repeats)
    store = dist.TCPStore("127.0.0.1", int(port), 2, is_master=rank == 0, timeout=datetime.timedelta(seconds=120))
    dev = "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank if transport == "collective" else 0)
        dev = f"cuda:{torch.cuda.current_device()}"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tensor_mb = min(64, int(size_mb))  # tensors of up to 64 MiB, like a model's layers
    elem = torch.empty((), dtype=dtype).element_size()
    per, count = tensor_mb * 2**20 // elem, max(1, int(size_mb) // tensor_mb)
    shapes = {f"w{i}": ((per,), dtype) for i in range(count)}
    plan = build_plan(shapes, trainer_ranks=1, generator_ranks=1, dtype=dtype)
    kw = dict(transport=transport, store=store, timeout_s=120.0)
    if rank == 0:
        state = {n: torch.full(s, float(i + 1), dtype=dtype, device=dev) for i, (n, (s, _)) in enumerate(shapes.items())}
        end = DdmaSender(plan, 0, device=dev, **kw)
    else:
        state = {n: torch.zeros(s, dtype=dtype, device=dev) for n, (s, _) in shapes.items()}
        end = DdmaReceiver(plan, 0, state, run_id=f"gpucheck{port}", **kw)
    seconds = []
    for v in range(repeats + 1):  # the first is a warm-up
        store.set(f"go/{v}/{rank}", "1")
        store.wait([f"go/{v}/0", f"go/{v}/1"])
        t0 = time.perf_counter()
        if rank == 0:
            end.send(state, v)
            store.wait([f"adopted-by-check/{v}"])  # until the generator computes from version v
        else:
            end.receive()
            store.set(f"adopted-by-check/{v}", "1")
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
    ok = rank == 0 or all(bool((t == float(i + 1)).all()) for i, t in enumerate(state.values()))
    nbytes = sum(math.prod(s) * elem for s, _ in shapes.values())
    best = min(seconds[1:])
    Path(out).write_text(json.dumps({"bytes": nbytes, "repeats": repeats, "best_seconds": round(best, 5),
                                     "gbps": round(nbytes / best / 1e9, 3), "received_equal": ok}))
    store.set(f"closed/{rank}", "1")
    end.close()
    if rank == 0:
        store.wait(["closed/1"])  # the store's host outlives its client


def _load_config(recipe: str, overrides: list[str]):
    """Hydra where installed (as `llamarl`), else the recipe file merged with OmegaConf alone."""
    try:
        from llamarl_core.config.load import load_config
        return load_config(recipe, overrides)
    except ImportError:
        from omegaconf import OmegaConf

        from llamarl_core.config.schema import LlamaRLConfig

        raw = OmegaConf.load(ROOT / "recipes" / f"{recipe}.yaml")
        raw.pop("defaults", None)  # GPU recipes compose only the schema
        merged = OmegaConf.merge(OmegaConf.structured(LlamaRLConfig), raw, OmegaConf.from_dotlist(overrides))
        merged.recipe = recipe
        return OmegaConf.to_object(merged)


def check_train(device: str, size: dict, run_dir: str) -> dict:
    from llamarl_core.plan.plan import make_plan
    from llamarl_core.runtime.controller import Controller
    from llamarl_core.runtime.devices import check_host

    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)  # as `llamarl train` does (runtime/run_dir.py)
    overrides = size["train_overrides"] + [f"run.dir={run_dir}", "run.weight_checksums=true"]
    cfg = _load_config(size["train_recipe"], overrides)
    plan = make_plan(cfg, run_dir=run_dir)
    check_host(plan.to_dict(), cfg.recipe)
    result = Controller(cfg, plan, run_dir).run()
    if not result.ok:
        raise RuntimeError(f"{result.message} {result.log_tail[-1500:]}")
    lines = [json.loads(x) for x in Path(run_dir, "weight_checksums.jsonl").read_text().splitlines()]
    sent = {x["version"]: x["sha256"] for x in lines if x["role"] == "trainer"}
    held = [x for x in lines if x["role"] == "generator"]
    summary = json.loads(Path(run_dir, "summary.json").read_text())
    return {"recipe": cfg.recipe, "steps": summary["steps"], "rl_wall_s": summary["rl_wall_s"],
            "accuracy_before": summary["accuracy_before"], "accuracy_after": summary["accuracy_after"],
            "versions_synced": len(sent), "checksums_equal": bool(held) and all(sent.get(x["version"]) == x["sha256"] for x in held)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_sync_worker":
        _sync_worker(*argv[1:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--out", default="benchmarks/results/gpu_check.json")
    p.add_argument("--skip", nargs="*", default=[], help="section names to leave out")
    args = p.parse_args(argv)
    size, t0 = SIZES[args.device], time.time()
    result = {"command": "python scripts/gpu_check.py " + " ".join(argv), "device": args.device,
              "sizes": {k: v for k, v in size.items() if k != "train_overrides"}}
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        for name, fn, extra in (("env", check_env, ()), ("logits_parity", check_logits_parity, (size,)),
                                ("generation", check_generation, (size,)), ("fp8", check_fp8, (size,)),
                                ("weight_sync", check_weight_sync, (size,)),
                                ("train", check_train, (size, os.path.join(tmp, "run")))):
            result[name] = {"ok": None, "skipped": True} if name in args.skip else section(name, fn, args.device, *extra)
    result["total_seconds"] = round(time.time() - t0, 1)
    result["loadavg_end"] = list(os.getloadavg())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    failed = [k for k, v in result.items() if isinstance(v, dict) and v.get("ok") is False]
    print(f"wrote {args.out}; " + (f"FAILED sections: {', '.join(failed)}" if failed else "all sections ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
