"""One command for a GPU: does every GPU path work here, how fast, and is that good enough?

    python scripts/gpu_check.py --out benchmarks/results/gpu_check.json        # CUDA, <= 6 min
    python scripts/gpu_check.py --device cpu --out /tmp/gpu_check_cpu.json     # the CPU twin, < 3 min

Each section runs in a subprocess of its own (killed at its timeout), all under one overall
deadline (`--deadline-s`, 360 s); a section that fails, raises or hangs is recorded and the
rest still run. Every number that decides stands in the JSON beside its threshold
(`thresholds`, `checks`), each section has a `verdict` (pass | fail | skip), and the script
exits 1 when any section failed (2 on bad arguments).

    env            torch / CUDA / NCCL versions, the device, host load
    logits_parity  our Llama vs transformers' LlamaForCausalLM, same weights
    generation     engine decode tokens/s vs transformers.generate, same weights and batch
    fp8            fp8 e4m3 weight-only (torch._scaled_mm) vs bf16: next-token KL and tokens/s
    train_step     FSDP2 on one device, bf16 compute, activation checkpointing: tokens/s and
                   peak memory against the plan's estimate
    weight_sync    DDMA between two processes vs a device-to-device copy_ of the same bytes:
                   CUDA IPC, and NCCL with 2+ GPUs (CPU: shm and gloo)
    mismatch       μ (bf16 engine) vs π (bf16 trainer) on the same weights, staleness 0
    train          an async run of recipe gpu_1x (20 steps; CPU: cpu_tiny, 2) with weight
                   checksums; on CUDA its held-out accuracy must rise

Runs from a source checkout without installing it (the repository root goes on sys.path and
PYTHONPATH).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
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

DEADLINE_S = 360.0
# (name, module, function, timeout in seconds on cuda, on cpu), in the order they run
SECTIONS = [
    ("env", "gpu_sections", "env", 60, 60),
    ("logits_parity", "gpu_sections", "logits_parity", 60, 60),
    ("generation", "gpu_sections", "generation", 90, 60),
    ("fp8", "gpu_sections", "fp8", 60, 30),
    ("train_step", "gpu_train_sections", "train_step", 90, 60),
    ("weight_sync", "gpu_sync", "weight_sync", 120, 90),
    ("mismatch", "gpu_train_sections", "mismatch", 90, 90),
    ("train", "gpu_train_sections", "train", 240, 150),
]
NAMES = [s[0] for s in SECTIONS]


def run_section(name: str, device: str, out: str) -> int:
    """(In the section's own process) run it and write its result."""
    import importlib

    import torch  # noqa: F401

    _, module, fn, *_ = next(s for s in SECTIONS if s[0] == name)
    sections = importlib.import_module(f"llamarl_core.bench.{module}")
    from llamarl_core.bench.gpu_sizes import SIZES
    try:
        result = getattr(sections, fn)(device, SIZES[device])
    except Exception as e:  # noqa: BLE001 - a failing section is a verdict, not a crash
        result = {"verdict": "fail", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    Path(out).write_text(json.dumps(result, indent=2, default=str))
    return 0


def _spawn(name: str, device: str, timeout_s: float, tmp: str) -> dict:
    """The section in a subprocess (its own session, so its children die with it)."""
    out = os.path.join(tmp, f"{name}.json")
    env = {**os.environ, "GPU_CHECK_TMP": tmp}
    log = open(os.path.join(tmp, f"{name}.log"), "wb")
    proc = subprocess.Popen([sys.executable, __file__, "--_section", name, "--device", device, "--_out", out],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"verdict": "fail", "error": f"timed out after {timeout_s:.0f} s (killed)", "log_tail": _tail(log.name)}
    finally:
        log.close()
    if not os.path.exists(out):
        return {"verdict": "fail", "error": f"the section's process exited with {proc.returncode} and no result",
                "log_tail": _tail(log.name)}
    return json.loads(Path(out).read_text())


def _tail(path: str, chars: int = 2000) -> str:
    return Path(path).read_text(errors="replace")[-chars:]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--out", default="benchmarks/results/gpu_check.json")
    p.add_argument("--only", nargs="*", choices=NAMES, help="run just these sections (the others: skip)")
    p.add_argument("--deadline-s", type=float, default=DEADLINE_S, help="the whole check's time limit")
    p.add_argument("--_section", choices=NAMES, help=argparse.SUPPRESS)
    p.add_argument("--_out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._section:
        return run_section(args._section, args.device, args._out)
    from llamarl_core.bench.gpu_sizes import SIZES
    from llamarl_core.bench.provenance import git_commit, load_average

    t0 = time.time()
    deadline = t0 + args.deadline_s
    result: dict = {"command": "python scripts/gpu_check.py " + " ".join(argv), "commit": git_commit(),
                    "device": args.device, "deadline_s": args.deadline_s,
                    "sizes": {k: v for k, v in SIZES[args.device].items() if k != "train_overrides"}}
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        for name, _, _, cuda_s, cpu_s in SECTIONS:
            started = time.time()
            left = deadline - started
            if args.only is not None and name not in args.only:
                section = {"verdict": "skip", "reason": "not in --only"}
            elif left < 5:
                section = {"verdict": "fail", "error": f"not run: the overall deadline of {args.deadline_s:.0f} s was spent"}
            else:
                section = _spawn(name, args.device, min(cuda_s if args.device == "cuda" else cpu_s, left), tmp)
            section["seconds"] = round(time.time() - started, 2)
            result[name] = section
            print(f"[{section['verdict']:>4}] {name} ({section['seconds']} s)"
                  + (f": {section.get('error') or section.get('reason')}" if section["verdict"] != "pass" else "")
                  + ("" if section["verdict"] != "fail" or "checks" not in section else
                     f" failed checks: {[section['thresholds'][k] for k, ok in section['checks'].items() if not ok]}"),
                  flush=True)
    result["total_seconds"] = round(time.time() - t0, 1)
    result["loadavg_end"] = load_average()
    failed = [k for k in NAMES if result[k]["verdict"] == "fail"]
    result["verdict"] = "fail" if failed else "pass"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {args.out} in {result['total_seconds']} s; " +
          (f"FAILED: {', '.join(failed)}" if failed else "every section passed or was skipped"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
