"""How much each fitted constant moves a prediction: the numbers docs/SIMULATOR.md quotes.

For each named constant, the prediction is recomputed with that constant alone scaled by each
factor (default x0.8 and x1.2, i.e. +-20 %) and reported beside the unchanged prediction:
sync and async step seconds and the speedup, and the speedup's relative change.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

FACTORS = (0.8, 1.2)


def _summary(result: dict) -> dict:
    return {"sync_step_s": result["sync"]["step_s"], "async_step_s": result["async"]["step_s"],
            "speedup": result["sync"]["step_s"] / result["async"]["step_s"]}


def sensitivity(predict: Callable[[object], dict], constants, names: tuple[str, ...],
                factors: tuple[float, ...] = FACTORS) -> dict:
    """`predict(constants) -> {"sync": {"step_s"}, "async": {"step_s"}}`; `constants` a frozen
    dataclass; returns {"base": summary, name: {"x0.8": summary + speedup_change, ...}}."""
    base = _summary(predict(constants))
    out: dict = {"base": base}
    for name in names:
        out[name] = {}
        for f in factors:
            try:
                s = _summary(predict(replace(constants, **{name: getattr(constants, name) * f})))
            except ValueError as e:  # e.g. no KV cache fits any more: say so, do not guess
                out[name][f"x{f:g}"] = {"error": str(e)}
                continue
            s["speedup_change"] = s["speedup"] / base["speedup"] - 1
            out[name][f"x{f:g}"] = s
    return out
