"""Sensitivity of a prediction to one constant at a time (sim/sensitivity.py)."""
from dataclasses import dataclass

import pytest

from llamarl_core.sim.sensitivity import sensitivity


@dataclass(frozen=True)
class Toy:
    a: float = 1.0
    b: float = 2.0


def predict(c: Toy) -> dict:  # sync 4a, async b: speedup 4a/b
    if c.b > 2.2:
        raise ValueError("b too large")
    return {"sync": {"step_s": 4 * c.a}, "async": {"step_s": c.b}}


def test_each_constant_is_scaled_alone_and_the_speedup_change_is_relative():
    s = sensitivity(predict, Toy(), ("a", "b"))
    assert s["base"] == {"sync_step_s": 4.0, "async_step_s": 2.0, "speedup": 2.0}
    assert s["a"]["x0.8"]["speedup"] == pytest.approx(1.6)
    assert s["a"]["x1.2"]["speedup_change"] == pytest.approx(0.2)
    assert s["b"]["x0.8"]["speedup_change"] == pytest.approx(2.0 / 1.6 - 1)  # +25 %


def test_a_constant_that_breaks_the_model_reports_the_error_instead_of_a_number():
    assert s_error() == "b too large"


def s_error() -> str:
    return sensitivity(predict, Toy(), ("b",))["b"]["x1.2"]["error"]
