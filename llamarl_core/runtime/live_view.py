"""What the controller shows while a run goes, from the store's `metrics/latest`,
`progress/<phase>` and `status/<role>/<rank>` keys.

On a terminal: one rich panel, at most 80 columns wide, redrawn 4 times a second: step of
max steps with a bar and ETA, reward, held-out accuracy where RL started beside the newest
(`progress/heldout_accuracy`: `0.500 → 0.735 (+23.5)`), staleness, IS ratio, sync time, each
role's busy share as a bar, progress bars for the warm start and a held-out eval while they
run (the eval's rows as the engine finishes them), the ranks' states, the metrics line's
`warnings` (a run that cannot learn) and, once it is over, why the run ended
(observe/end_reason.py). Not a terminal (CI, a log file): one plain line per step.
"""
from __future__ import annotations

import time
from collections import Counter

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from llamarl_core.observe.progress import ACCURACY_KEY

BAR_WIDTH = 24
PANEL_WIDTH = 80
PHASES = (("warmstart", "warm start"), ("eval", "held-out eval"))


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A text bar: `fraction` of `width` cells filled (clamped to [0, 1])."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def eta_s(m: dict, max_steps: int, max_time_s: float, rl_elapsed_s: float | None) -> float | None:
    """Seconds left: remaining steps at the mean step time so far, capped by the RL time limit."""
    step = m.get("step", 0)
    if not step or not max_steps:
        return None
    per_step = rl_elapsed_s / step if rl_elapsed_s else m.get("trainer/step_s", 0.0)
    left = max(0, max_steps - step) * per_step
    if max_time_s and rl_elapsed_s is not None:
        left = min(left, max(0.0, max_time_s - rl_elapsed_s))
    return left


def _num(value, spec: str = ".3f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "–"


def accuracy_text(latest, start=None) -> str:
    """'0.500 → 0.735 (+23.5)' (points), or the one number while only one eval has run."""
    if not isinstance(start, (int, float)) or not isinstance(latest, (int, float)):
        return _num(latest)
    return f"{start:.3f} → {latest:.3f} ({(latest - start) * 100:+.1f})"


def busy_fractions(m: dict) -> dict[str, float]:
    return {role: m[f"{role}/busy_frac"] for role in ("trainer", "generator", "reward")
            if isinstance(m.get(f"{role}/busy_frac"), (int, float))}


def render(m: dict, progress: dict, statuses: dict, *, title: str, max_steps: int,
           max_time_s: float = 0.0, accuracy=None, rl_elapsed_s: float | None = None,
           start_accuracy=None, ended: str | None = None) -> Panel:
    """`accuracy`: the newest held-out accuracy, `start_accuracy` where RL started; `ended`:
    why the run ended, in words (end_reason.end_line), once it has."""
    step = m.get("step", 0)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, min_width=max(len("generator busy"), len("held-out eval")))
    grid.add_column(overflow="fold")
    frac = step / max_steps if max_steps else 0.0
    grid.add_row("step", f"{step}/{max_steps} {bar(frac)} ETA {duration(eta_s(m, max_steps, max_time_s, rl_elapsed_s))}")
    grid.add_row("reward", f"{_num(m.get('reward/mean'))}   held-out accuracy {accuracy_text(accuracy, start_accuracy)}")
    grid.add_row("staleness", f"mean {_num(m.get('trainer/staleness_mean'), '.2f')} "
                              f"max {_num(m.get('trainer/staleness_max'), '.0f')}   IS ratio max "
                              f"{_num(m.get('trainer/is_ratio_max'), '.2f')}")
    if "env/turns_mean" in m:  # multi-turn episodes (env.entry / env.tools)
        grid.add_row("episodes", f"turns {_num(m.get('env/turns_mean'), '.2f')}  tool calls "
                                 f"{_num(m.get('env/tool_calls_mean'), '.2f')}  errors "
                                 f"{_num(m.get('env/tool_errors'), '.0f')}  cut "
                                 f"{_num(m.get('env/truncated_frac'), '.2f')}  env "
                                 f"{_num(m.get('env/step_s'), '.2f')} s")
    sync_ms = m.get("sync/seconds", 0.0) * 1e3 if "sync/seconds" in m else None
    grid.add_row("sync", f"{_num(sync_ms, '.1f')} ms  {_num(m.get('sync/gbps'), '.2f')} GB/s   step "
                         f"{_num(m.get('trainer/step_s'), '.2f')} s")
    for role, f in busy_fractions(m).items():
        grid.add_row(f"{role} busy", f"{bar(f)} {f:4.0%}")
    for key, label in PHASES:
        p = progress.get(key)
        if p and p.get("total") and p.get("done", 0) < p["total"]:
            grid.add_row(label, f"{bar(p['done'] / p['total'])} {p['done']}/{p['total']}")
    restarts = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("restarts/") and v}
    if restarts:
        grid.add_row("restarts", "  ".join(f"{r} {n}" for r, n in sorted(restarts.items())))
    grid.add_row("ranks", _rank_states(statuses))
    for w in m.get("warnings", ()):  # the run cannot learn (observe/learning_signal.py)
        grid.add_row("[yellow]warning[/]", Text(w, style="yellow", overflow="fold"))
    if ended:
        grid.add_row("ended", Text(ended.removeprefix("run ended: "), overflow="fold"))
    return Panel(grid, title=title, width=PANEL_WIDTH, title_align="left")


def _rank_states(statuses: dict) -> Text:
    """Per role, how many ranks are in each state ("trainer 1 train · generator 2 generate")."""
    per_role: dict[str, Counter] = {}
    for (role, _), s in sorted(statuses.items()):
        per_role.setdefault(role, Counter())[s.get("state", "starting")] += 1
    parts = [f"{role} " + ", ".join(f"{n} {state}" for state, n in c.items()) for role, c in per_role.items()]
    return Text(" · ".join(parts), overflow="fold")


def plain_line(m: dict) -> str:
    acc = f" acc {m['eval/accuracy']:.3f}" if "eval/accuracy" in m else ""
    restarts = "".join(f"  restarts {k.split('/', 1)[1]} {v}" for k, v in sorted(m.items())
                       if k.startswith("restarts/") and v)
    return (f"step {m['step']:>4}  v{m.get('policy_version', '?')}  reward {m.get('reward/mean', 0):.3f}"
            f"{acc}  staleness {m.get('trainer/staleness_mean', 0):.2f}  "
            f"sync {m.get('sync/seconds', 0) * 1e3:.1f} ms  step {m.get('trainer/step_s', 0):.2f} s{restarts}"
            + (f"  turns {m['env/turns_mean']:.2f}  tool calls {m.get('env/tool_calls_mean', 0):.2f}"
               if "env/turns_mean" in m else "")
            + "".join(f"  warning: {w}" for w in m.get("warnings", ())))


class LiveView:
    def __init__(self, console: Console | None = None, cfg=None):
        self.console = console or Console()
        self.live: Live | None = None
        self.last_step = 0
        self.last_accuracy = None
        self.start_accuracy = None
        self.last_seen: tuple = ({}, {}, {})  # metrics, progress, statuses: the final panel's
        self.max_steps = cfg.run.max_steps if cfg is not None else 0
        self.max_time_s = cfg.run.max_time_s if cfg is not None else 0.0
        self.title = f"llamarl · {cfg.recipe}" if cfg is not None else "llamarl"
        self.rl_started_at: float | None = None

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
            progress = {key: control.get_json(f"progress/{key}", None) for key, _ in PHASES}
            statuses = {(r.name, i): control.status(r.name, i) for r in plan.roles for i in range(r.num_devices)}
            heldout = control.get_json(ACCURACY_KEY, None) or {}
        except Exception:  # the store may be gone at shutdown; the view never breaks a run
            return
        self.last_seen = (m, progress, statuses)
        if "latest" in heldout:  # every eval, the first one (before RL) included
            self.start_accuracy, self.last_accuracy = heldout.get("start"), heldout["latest"]
        if m.get("step") and self.rl_started_at is None:
            self.rl_started_at = time.time() - m.get("trainer/step_s", 0.0)
        if self.live is not None:
            self.live.update(self._panel(*self.last_seen))
        elif m.get("step", 0) > self.last_step:
            self.last_step = m["step"]
            self.console.print(plain_line(m), highlight=False, soft_wrap=True)  # one line per step, whatever its width

    def _panel(self, m: dict, progress: dict, statuses: dict, ended: str | None = None) -> Panel:
        elapsed = time.time() - self.rl_started_at if self.rl_started_at else None
        return render(m, progress, statuses, title=self.title, max_steps=self.max_steps,
                      max_time_s=self.max_time_s, accuracy=self.last_accuracy, rl_elapsed_s=elapsed,
                      start_accuracy=self.start_accuracy, ended=ended)

    def finish(self, end_line: str | None) -> None:
        """The run is over: on a terminal the panel's last frame says why (its finished phases
        gone). Nothing is read from the store, which may be gone by now. Without a terminal,
        `llamarl train`'s closing lines say it (cli/train_cmd.py: report)."""
        if end_line and self.live is not None:
            m, _, statuses = self.last_seen
            self.live.update(self._panel(m, {}, statuses, ended=end_line))
