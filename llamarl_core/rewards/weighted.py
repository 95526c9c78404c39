"""``WeightedRewards``: the training reward of a completion as sum_i weight_i * r_i over several
reward terms (``data.rewards``; TRL's ``reward_funcs`` + ``reward_weights``), and a run's single
``data.reward`` as the one-term case.

One ``RewardPool`` per term, each scoring a whole batch in one call: a term's own timeouts,
errors and worker crashes are counted and bounded as for a single reward (a term that hangs
scores 0 for that term only, the other terms of the completion keep their values), and a
built-in term (gsm8k, arith) needs no worker process at all. Why not every term of a completion
in one worker task: a timeout there kills the worker and zeroes all of that completion's terms,
and could not say which term hung.

A term's failed value (raised, timed out, not a finite number within ``reward.max_abs``:
``values.py``) is 0, as for a single reward; TRL instead drops a None with ``nansum``.
``term_sums`` / ``term_counts`` accumulate each term's unweighted values: the reward role
reports them, and ``observe/metrics_log.py`` turns them into ``reward/<name>_mean``.
"""
from __future__ import annotations

from llamarl_core.rewards.pool import RewardPool


class WeightedRewards:
    """``terms``: (name, reward spec, weight) each; ``pool_kwargs`` go to every term's pool."""

    def __init__(self, terms: list[tuple[str, str, float]], **pool_kwargs) -> None:
        if not terms:
            raise ValueError("WeightedRewards needs at least one term")
        self.names = [name for name, _, _ in terms]
        self.weights = [float(weight) for _, _, weight in terms]
        self.pools: list[RewardPool] = []
        try:
            for _, spec, _ in terms:
                self.pools.append(RewardPool(spec, **pool_kwargs))
        except BaseException:
            self.close()
            raise
        self.term_sums = dict.fromkeys(self.names, 0.0)
        self.term_counts = dict.fromkeys(self.names, 0)

    @property
    def name(self) -> str:
        return " + ".join(f"{w:g}*{n}" for n, w in zip(self.names, self.weights)) if len(self.pools) > 1 \
            else self.pools[0].name

    @property
    def custom(self) -> bool:
        """Whether some term is a user's function (it receives the example dict, not the reference)."""
        return any(pool.spec.custom for pool in self.pools)

    @property
    def stats(self) -> dict:
        """The pools' counters, summed (``reward/errors``, ``reward/timeouts`` count term values)."""
        out: dict = {}
        for pool in self.pools:
            for key, value in pool.stats.items():
                out[key] = out.get(key, 0) + value
        return out

    @property
    def first_error(self) -> str | None:
        return next((p.first_error for p in self.pools if p.first_error), None)

    @property
    def first_timeout(self) -> str | None:
        return next((p.first_timeout for p in self.pools if p.first_timeout), None)

    def score(self, completions: list[str], references: list, examples: list | None = None) -> list[float]:
        """Per completion, sum_i weight_i * r_i; a built-in term compares against ``references``
        (the reference answers), a custom one receives ``examples`` (the rows as dicts)."""
        totals = [0.0] * len(completions)
        for name, weight, pool in zip(self.names, self.weights, self.pools):
            values = pool.score(completions, examples if pool.spec.custom else references)
            self.term_sums[name] += sum(values)
            self.term_counts[name] += len(values)
            for k, v in enumerate(values):
                totals[k] += weight * v
        return totals

    def close(self) -> None:
        for pool in self.pools:
            pool.close()

    def __enter__(self) -> "WeightedRewards":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
