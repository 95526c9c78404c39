"""The simulator's cases are the recipes: 8b_gsm8k, 70b_gsm8k and 405b_math, read through the
adapter (sim/adapter.py), so the splits, dtypes, batching and lengths it predicts are the ones
`llamarl plan` and `llamarl train` run. Beside them, the paper's published step times.
"""
from __future__ import annotations

from llamarl_core.config.load import load_config
from llamarl_core.config.hardware import get_device
from llamarl_core.models.args import get_preset
from llamarl_core.sim.adapter import sim_inputs_from_config
from llamarl_core.sim.constants import DEFAULT_CONSTANTS, SimConstants
from llamarl_core.sim.simulator import SimInputs, simulate

# Published RL step times on H100 (arXiv 2505.24034, section 6): synchronous
# DeepSpeed-Chat-like baseline vs LlamaRL. 8B and 70B were used to set the constants (with the
# splits of that time, docs/SIMULATOR.md); 405B was not.
PUBLISHED_STEP_S: dict[str, dict] = {
    "8b": {"sync": 22.45, "async": 8.90, "devices": 256, "fitted": True},
    "70b": {"sync": 82.32, "async": 20.67, "devices": 256, "fitted": True},
    "405b": {"sync": 635.8, "async": 59.5, "devices": 1024, "fitted": False},
}

# Which recipe is each published case.
CASE_RECIPES = {"8b": "8b_gsm8k", "70b": "70b_gsm8k", "405b": "405b_math"}


def case_inputs(name: str, constants: SimConstants = DEFAULT_CONSTANTS) -> SimInputs:
    """SimInputs of a published case: its recipe through the adapter."""
    if name not in CASE_RECIPES:
        raise KeyError(f"unknown simulator case {name!r}; known: {', '.join(CASE_RECIPES)}")
    cfg = load_config(CASE_RECIPES[name])
    return sim_inputs_from_config(cfg, get_preset(cfg.model.preset), get_device(cfg.resources.device),
                                  constants)


def calibrate(constants: SimConstants = DEFAULT_CONSTANTS) -> list[dict]:
    """Run every paper case; each row holds predicted and published step times."""
    rows = []
    for name, published in PUBLISHED_STEP_S.items():
        result = simulate(case_inputs(name, constants), constants)
        rows.append({
            "case": name, "recipe": CASE_RECIPES[name], "devices": published["devices"], "fitted": published["fitted"],
            "sync": {"predicted_s": result["sync"]["step_s"], "published_s": published["sync"],
                     "ratio": result["sync"]["step_s"] / published["sync"]},
            "async": {"predicted_s": result["async"]["step_s"],
                      "published_s": published["async"],
                      "ratio": result["async"]["step_s"] / published["async"]},
            "speedup": {"predicted": result["speedup"],
                        "published": published["sync"] / published["async"]},
            "result": result,
        })
    return rows


def format_table(rows: list[dict]):
    """A rich Table of predicted vs published step times (rows from `calibrate`)."""
    from rich.table import Table

    table = Table(title="Scale simulator vs LlamaRL paper (H100, seconds per RL step)")
    for column in ("case", "GPUs", "sync pred", "sync paper", "async pred", "async paper",
                   "speedup pred", "speedup paper", "fitted"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["case"], str(row["devices"]),
            f"{row['sync']['predicted_s']:.1f} ({row['sync']['ratio'] - 1:+.0%})",
            f"{row['sync']['published_s']:.2f}",
            f"{row['async']['predicted_s']:.1f} ({row['async']['ratio'] - 1:+.0%})",
            f"{row['async']['published_s']:.2f}",
            f"{row['speedup']['predicted']:.2f}x", f"{row['speedup']['published']:.2f}x",
            "yes" if row["fitted"] else "no (check)")
    return table
