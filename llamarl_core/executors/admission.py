"""The one admission rule: when a generator replica may start a chunk (issue #46 item 1).

Every path that starts generation asks `Admission.may_start`; nothing else compares versions
with k (algorithm.max_offpolicy_steps). A trainer step takes P prompts; replica i of G
generates its share of them per chunk, and owns (k + 1) chunk slots, so (k + 1)·P prompt slots
over all replicas:

    chunk n of replica i is trained at step  v(n) = n − extra_i
      extra_i: chunks of i a step took beyond its one (dynamic sampling, `add_extra`)
    the trainer takes each replica's chunks in order, one per step (executors/intake.py),
    so chunk n may start only while it fits the window of the held version u:

        may_start(n, u):  u ≥ 0  and  n − extra_i ≤ u + k

    and then every token of it, sampled under a version ≥ u, is trained at v(n) ≤ u + k:
    never older than k. Nothing is dropped, nothing generated twice. k = 0 is the same code,
    one slot: the sync actor generates chunk v + extra at version v.

  replica i's slots (k = 1)          waits for                   unblocks
    chunk n − 1   trained at v        —                           —
    chunk n       in flight           —                           —
    chunk n + 1   may_start? no       the trainer's version v + 1  a newer held version
                                      (a SWAP on the generator),   (generate_loop.receive,
                                      or one more extra chunk      stream's between-steps look)
                                      taken (dynamic sampling)

Who asks: `GenerateLoop.may_generate` (the generator's loop before it streams; TP followers
replay their leader's decisions), the stream's per-chunk gate (`GeneratorExecutor._stream`), the sync actor's
`OwnChunks.collect` (k = 0: true at held = the version it trains; asked anyway, so the rule is
one). tests/unit/test_admission.py patches `may_start` and watches every path obey it.
"""
from __future__ import annotations

from llamarl_core.executors.ports import ControlStore


class Admission:
    def __init__(self, control: ControlStore, replica: int, max_offpolicy_steps: int):
        """`control`: where `extra/<replica>` lives (trainer rank(s) add to it); `replica`: the
        generator replica (the actor rank in sync mode); `max_offpolicy_steps`: k."""
        self.control, self.replica, self.k = control, replica, max_offpolicy_steps

    def may_start(self, chunk: int, held: int) -> bool:
        """Whether `chunk` may start under held version `held` (-1: none held yet)."""
        return held >= 0 and chunk - self.control.extra(self.replica) <= held + self.k
