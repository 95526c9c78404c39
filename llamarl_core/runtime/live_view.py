"""What the controller shows while a run goes: step, reward, accuracy, staleness, sync time,
and each rank's state. A rich Live table on a terminal; one plain line per step otherwise."""
from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table


class LiveView:
    def __init__(self, console: Console | None = None):
        self.console = console or Console()
        self.live: Live | None = None
        self.last_step = 0
        self.last_accuracy = None

    def __enter__(self):
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, control, plan) -> None:
        try:
            m = control.get_json("metrics/latest", {}) or {}
            statuses = {(r.name, i): control.status(r.name, i) for r in plan.roles for i in range(r.num_devices)}
        except Exception:
            return
        if "eval/accuracy" in m:
            self.last_accuracy = m["eval/accuracy"]
        if self.live is not None:
            self.live.update(self._table(m, statuses))
        elif m.get("step", 0) > self.last_step:
            self.last_step = m["step"]
            acc = f" acc {m['eval/accuracy']:.3f}" if "eval/accuracy" in m else ""
            self.console.print(
                f"step {m['step']:>4}  v{m.get('policy_version', '?')}  reward {m.get('reward_mean', 0):.3f}"
                f"{acc}  staleness {m.get('trainer/staleness_mean', 0):.2f}  "
                f"sync {m.get('sync/seconds', 0) * 1e3:.1f} ms  step {m.get('step_s', 0):.2f} s",
                highlight=False)

    def _table(self, m: dict, statuses: dict) -> Table:
        t = Table(title=f"llamarl · step {m.get('step', 0)} · policy v{m.get('policy_version', 0)}")
        t.add_column("metric")
        t.add_column("value", justify="right")
        acc = self.last_accuracy
        for name, value in (("reward mean", m.get("reward_mean")),
                            ("held-out accuracy", acc),
                            ("staleness mean / max", f"{m.get('trainer/staleness_mean', 0):.2f} / "
                                                     f"{m.get('trainer/staleness_max', 0):.0f}"),
                            ("importance ratio max", m.get("trainer/is_ratio_max")),
                            ("sync ms / GB/s", f"{m.get('sync/seconds', 0) * 1e3:.1f} / {m.get('sync/gbps', 0):.2f}"),
                            ("generator tokens/s", m.get("generator/tokens_per_s")),
                            ("step s", m.get("step_s"))):
            t.add_row(name, f"{value:.3f}" if isinstance(value, float) else str(value if value is not None else "–"))
        now = time.time()
        for (role, rank), s in statuses.items():
            state = s.get("state", "starting")
            t.add_row(f"[bold]{role}[/] {rank}", f"{state} {now - s.get('since', now):.0f}s")
        return t
