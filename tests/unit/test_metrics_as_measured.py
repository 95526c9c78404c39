"""metrics.jsonl and TensorBoard get values as measured: no rounding anywhere on the way, and
float32 measurements print as float32 prints them."""
import json

import torch

from llamarl_core.algorithms.metrics import as_float
from llamarl_core.config.schema import LoggingConfig
from llamarl_core.observe.metrics_log import MetricsLog
from llamarl_core.observe.rollout_stats import rollout_stats
from llamarl_core.wire.rollout import Rollout


def test_a_float32_measurement_prints_with_float32_digits_and_float64_with_its_own():
    assert json.dumps([as_float(torch.tensor(0.1)), as_float(torch.tensor(1e-6)),
                       as_float(torch.tensor(1 / 3)), as_float(torch.tensor(1 / 3, dtype=torch.float64))]) \
        == "[0.1, 1e-06, 0.33333334, 0.3333333333333333]"
    # each printed value reads back as exactly the measured float32
    for x in (0.1, 1e-6, 1 / 3, 123456.789, 3.4e38):
        t = torch.tensor(x)
        assert torch.tensor(as_float(t)).item() == t.item()


def test_rollout_stats_are_not_rounded():
    # rewards (0, 1, 1): population std sqrt(2)/3 = 0.47140452 in float32 (it used to log 0.4714);
    # completion lengths (1, 2, 2): mean 5/3 = 1.6666666 (it used to log 1.67)
    batch = Rollout(torch.ones(3, 6, dtype=torch.long), torch.full((3,), 2), torch.tensor([1, 2, 2]),
                    torch.zeros(3, 4), torch.tensor([0.0, 1.0, 1.0]), torch.zeros(3, dtype=torch.long), 0, 0, 0)
    stats = rollout_stats(batch, max_new_tokens=3, eos_ids=(2,))
    assert stats["reward/std"] == as_float(torch.tensor([0.0, 1.0, 1.0]).std(unbiased=False)) == 0.47140452
    assert stats["generator/completion_tokens_mean"] == 1.6666666


class _Control:
    """The store as MetricsLog reads it: one generator and one reward rank's counters."""

    def stats(self, role, rank):
        return {"busy_s": 1.23456789, "idle_s": 2.0000001, "tokens_per_s": 123.456789, "tokens": 7,
                "sync": {"seconds": 1.234567e-7}} if role == "generator" else {"busy_s": 1e-7, "idle_s": 3.0}

    def set_json(self, key, value):
        pass


def test_the_metrics_line_keeps_every_digit(tmp_path):
    log = MetricsLog(str(tmp_path), _Control(), {"generator": 1, "reward": 1}, LoggingConfig(tensorboard=False))
    log.write({"step": 1, "trainer/lr": 1e-6, "trainer/busy_s": 1.0, "trainer/wall_s": 3.0})
    log.close()
    line = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert line["trainer/lr"] == 1e-6 and line["generator/busy_s"] == 1.23456789
    assert line["generator/busy_frac"] == 1.23456789 / (1.23456789 + 2.0000001)
    assert line["generator/tokens_per_s"] == 123.456789 and line["sync/receive_seconds"] == 1.234567e-7
    assert line["reward/busy_s"] == 1e-7 and line["trainer/busy_frac"] == 1.0 / 3.0
