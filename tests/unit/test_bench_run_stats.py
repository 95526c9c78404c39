"""The sync-vs-async bench's numbers come from timeline spans: checked on hand-made spans."""
import json

import pytest

from llamarl_core.bench.run_stats import (accuracy_curve, idle_breakdown, phase_seconds_per_step, rl_window,
                                          role_fractions, run_stats, step_times, time_to_accuracy)
from llamarl_core.bench.sync_vs_async import aggregate_mode, compare


def span(role, state, t0, t1, rank=0, **kw):
    return {"role": role, "rank": rank, "state": state, "t0": t0, "t1": t1, **kw}


# An async run: warm start 0-2, initial eval 2-3, then two steps. The trainer waits 3-5 for
# the first batch, trains 5-8 and 8-11 with an eval at version 1 in between (8-9 → the second
# train is 9-12). The generator generates 3-5, 5-7, 9-11 and waits otherwise.
ASYNC = [
    span("trainer", "warmstart", 0, 2), span("trainer", "eval", 2, 3, version=0),
    span("trainer", "wait", 3, 5), span("trainer", "train", 5, 8),
    span("trainer", "eval", 8, 9, version=1), span("trainer", "train", 9, 12),
    span("generator", "generate", 3, 5), span("generator", "generate", 5, 7),
    span("generator", "wait", 7, 9), span("generator", "generate", 9, 11), span("generator", "wait", 11, 12),
    span("reward", "wait", 3, 5), span("reward", "score", 5, 5.5), span("reward", "wait", 5.5, 12),
]


def test_rl_window_starts_after_the_initial_eval_and_ends_with_the_last_train():
    assert rl_window(ASYNC) == (3, 12)


def test_step_times_exclude_periodic_evals():
    # step 1: 3 → 8 = 5 s; step 2: 8 → 12 = 4 s minus the 1 s eval = 3 s
    assert step_times(ASYNC, 3) == [5, 3]


def test_busy_and_idle_fractions_are_shares_of_the_rl_window():
    f = role_fractions(ASYNC, 3, 12)  # window 9 s
    # trainer: wait 2 s; busy = train 3 + eval 1 + train 3 = 7 s
    assert f["trainer"]["busy_fraction"] == pytest.approx(7 / 9)
    assert f["trainer"]["idle_fraction"] == pytest.approx(2 / 9)
    # generator: 2 + 2 + 2 = 6 s generating, 3 s waiting
    assert f["generator"]["busy_fraction"] == pytest.approx(6 / 9)
    assert f["reward"]["busy_fraction"] == pytest.approx(0.5 / 9)


def test_busy_fraction_is_the_mean_over_a_roles_ranks():
    spans = [span("actor", "train", 0, 4, rank=0), span("actor", "train", 0, 2, rank=1),
             span("actor", "wait", 2, 4, rank=1)]
    assert role_fractions(spans, 0, 4)["actor"]["busy_fraction"] == pytest.approx((1 + 0.5) / 2)


def test_phase_seconds_per_step_are_medians_over_steps_of_the_mean_over_ranks():
    # steps 3-8 and 8-12: generate 4 and 2 s, train 3 and 3, score 0.5 and 0
    assert phase_seconds_per_step(ASYNC, 3) == {"generate": 3, "score": 0.25, "train": 3}
    # a sync run of two actor ranks, three steps (0-4, 4-6, 6-8); the first is slow (train 3 s on
    # rank 0, 2 s on rank 1): per step train 2.5, 1.5, 1.5 -> median 1.5 (the mean would be 1.83)
    sync = [span("actor", "generate", 0, 1, rank=r) for r in (0, 1)] + [
        span("actor", "train", 1, 4), span("actor", "train", 1, 3, rank=1),
        *(span("actor", state, t, t + d, rank=r) for r in (0, 1)
          for t0 in (4, 6) for state, t, d in (("generate", t0, 0.5), ("train", t0 + 0.5, 1.5)))]
    assert phase_seconds_per_step(sync, 0) == {"generate": 0.5, "score": 0.0, "train": 1.5}


def test_accuracy_curve_puts_version_0_at_time_0_and_finds_the_first_eval_at_target():
    curve = accuracy_curve(ASYNC, {"accuracy_by_version": {"0": 0.1, "1": 0.6}}, 3)
    assert curve == [{"wall_s": 0.0, "version": 0, "accuracy": 0.1},
                     {"wall_s": 6, "version": 1, "accuracy": 0.6}]  # eval at version 1 ends at 9 = 3 + 6
    assert time_to_accuracy(curve, 0.5) == 6 and time_to_accuracy(curve, 0.7) is None


def test_run_stats_reads_a_run_directory(tmp_path):
    (tmp_path / "timeline").mkdir()
    for role in ("trainer", "generator", "reward"):
        rows = [json.dumps(s) for s in ASYNC if s["role"] == role]
        (tmp_path / "timeline" / f"{role}_0.jsonl").write_text("\n".join(rows) + "\n")
    metrics = [{"step": 1, "reward/mean": 0.2, "generator/tokens": 600, "sync/seconds": 0.1},
               {"step": 2, "reward/mean": 0.4, "generator/tokens": 900, "sync/seconds": 0.3}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(map(json.dumps, metrics)) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"accuracy_by_version": {"0": 0.1, "1": 0.6},
                                                       "accuracy_before": 0.1, "accuracy_after": 0.6}))
    r = run_stats(str(tmp_path), target_accuracy=0.5)
    assert r["rl_wall_s"] == 9 and r["step_s"] == [5, 3]
    assert r["tokens_per_s"] == pytest.approx(900 / 9)          # cumulative tokens / window
    assert r["sync_s_per_step"] == pytest.approx(0.2)           # median of 0.1 and 0.3
    assert r["time_to_target_s"] == 6
    assert [p["wall_s"] for p in r["reward_curve"]] == [5, 9]   # train ends 8 and 12, minus 3


def test_a_bad_timeline_line_names_the_file_and_line(tmp_path):
    (tmp_path / "timeline").mkdir()
    (tmp_path / "timeline" / "trainer_0.jsonl").write_text('{"role": "trainer"}\nnot json\n')
    with pytest.raises(ValueError, match="trainer_0.jsonl:2"):
        run_stats(str(tmp_path), 0.5)


def _run(step_s, phases):
    return {"step_s": step_s, "roles": {"trainer": {"busy_fraction": 0.5, "idle_fraction": 0.5}},
            "phase_s_per_step": phases, "sync_s_per_step": 0.0, "tokens_per_s": 1.0, "rl_wall_s": 1.0,
            "accuracy_before": 0.0, "accuracy_after": 0.5, "time_to_target_s": None}


def test_speedup_and_ideal_speedup_follow_their_definitions():
    sync = aggregate_mode([_run([4, 6], {"generate": 2, "score": 1, "train": 3}),
                           _run([5], {"generate": 2, "score": 1, "train": 3})])
    asyn = aggregate_mode([_run([2.5, 3.5], {"generate": 2, "score": 0.5, "train": 2.5})])
    assert sync["step_s_median"] == 5 and asyn["step_s_median"] == 3   # pooled steps 4, 5, 6
    c = compare(sync, asyn)
    assert c["speedup"] == pytest.approx(5 / 3)
    # ideal = (2 + 1 + 3) sync phases per step / 2.5 (async's slowest phase, train) = 2.4
    assert c["ideal_speedup"] == pytest.approx(2.4)
    assert c["speedup_over_ideal"] == pytest.approx((5 / 3) / 2.4)
    assert c["ideal_detail"]["async_slowest_phase"] == "train"


def test_overlap_counts_time_when_both_states_run_on_any_ranks():
    from llamarl_core.bench.run_stats import overlap_s
    spans = [{"role": "generator", "rank": 0, "state": "generate", "t0": 0.0, "t1": 4.0},
             {"role": "generator", "rank": 1, "state": "generate", "t0": 3.0, "t1": 6.0},   # union 0..6
             {"role": "trainer", "rank": 0, "state": "train", "t0": 2.0, "t1": 3.0},        # 1 s inside
             {"role": "trainer", "rank": 0, "state": "train", "t0": 5.0, "t1": 9.0},        # 1 s inside
             {"role": "trainer", "rank": 0, "state": "wait", "t0": 0.0, "t1": 9.0}]
    assert overlap_s(spans, "generate", "train", 0.0, 10.0) == 2.0
    assert overlap_s(spans, "generate", "train", 0.0, 5.5) == 1.5   # window clips the second
    assert overlap_s(spans, "generate", "score", 0.0, 10.0) == 0.0


def test_idle_breakdown_tells_waits_on_the_other_role_from_both_idle():
    # A k = 1 miss drawn by hand, window 10-20: the trainer waits 10-12 for its rows while the
    # generator makes them, trains 12-20; the generator generates 9-17, waits 17-21 for the version
    # the trainer publishes at 20.2 and takes it at 21 (3 s of that wait fall in the window). At
    # 19.5-20 the trainer pauses too (a bubble: 0.5 s with both idle).
    spans = [span("trainer", "wait", 10, 12), span("trainer", "train", 12, 19.5), span("trainer", "wait", 19.5, 20),
             span("trainer", "train", 20, 20.1), span("trainer", "sync", 20.1, 20.2),
             span("generator", "generate", 9, 17), span("generator", "wait", 17, 21),
             span("generator", "sync", 21, 21.1), span("generator", "generate", 21.1, 25)]
    got = idle_breakdown(spans, 10, 20)
    assert got["trainer_idle_while_generating_s"] == pytest.approx(2.0)
    assert got["both_idle_s"] == pytest.approx(0.5)
    assert got["generator_idle_until_adoption_s"] == pytest.approx(3.0)  # 17 -> 20, clipped to the window


def test_a_generator_gap_that_ends_in_generating_is_not_a_wait_for_weights():
    spans = [span("trainer", "train", 0, 10),
             span("generator", "generate", 0, 4), span("generator", "wait", 4, 6),  # ends in generate
             span("generator", "generate", 6, 8), span("generator", "sync", 9, 9.1)]  # gap 8-9, then a sync
    got = idle_breakdown(spans, 0, 10)
    assert got["generator_idle_until_adoption_s"] == pytest.approx(1.0)
    assert got["trainer_idle_while_generating_s"] == 0.0 and got["both_idle_s"] == 0.0
