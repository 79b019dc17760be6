"""bench_quality's EXPERIMENT contenders (issue 33): patches to the product that one search runs under, to measure
an idea before it becomes code of its own (docs/benchmarks.md, "Quality at equal compute", says what each measured)."""
from __future__ import annotations

import contextlib
from unittest import mock


def patch(contender: str):
    """The context a contender's search runs in: its experiment's patches, or none."""
    experiments = {"evens-promotion-first-rung": first_rung_parents, "evens-promotion-random-third": random_third,
                   "evens-promotion-crowding": crowding, "evens-no-promotion-crowding": crowding,
                   "evens-promotion-random-until-promoted": random_until_promoted}
    return experiments.get(contender, contextlib.nullcontext)()


def first_rung_parents():
    """EXPERIMENT (issue 33, ``evens-promotion-first-rung``): the GA with promotion keeps each network in its population
    by its first stage's result, ranked by fitness alone, so that every network is judged on the same budget; the rungs
    decide only how long a network trains (a promotion's later stages never replace its first). The product ranks
    by rung first; this patches the steady-state strategy while one search runs."""
    from evolve.search import strategy

    individual = strategy._individual
    return _patched(
        (strategy.SteadyState, "_carry_on", lambda self, record: True),  # a later stage: its network is in the population already
        (strategy, "_individual", lambda record, rungs=False: individual(record, False)))


def random_third():
    """EXPERIMENT (issue 33, ``evens-promotion-random-third``): with promotion, a third of the GA's proposals are random
    genomes, as BOHB mixes random configurations into its model's (against a population that converges on one family
    when it breeds four times as many networks). Patches the steady-state strategy while one search runs."""
    from evolve.search import strategy

    ask = strategy.SteadyState.ask
    return _patched((strategy.SteadyState, "ask", lambda self: self.random() if self.rungs and self.rng.random() < 1 / 3 else ask(self)))


def crowding():
    """EXPERIMENT (issue 33 ``evens-promotion-crowding``, ``evens-no-promotion-crowding``; issue 32's GunPoint): the
    steady-state GA replaces the member nearest the newcomer (L1 distance between genomes in [0, 1]^n), if the
    newcomer ranks above it, instead of the population's worst: restricted tournament replacement with the whole
    population as its window (Harik 1995), a niching scheme that keeps several designs alive where replacing the worst
    lets one design fill the population (GunPoint's halls of near-copies; promotion's population converging on one
    family). Elitist still: the best member leaves only for a better newcomer."""
    from evolve.search import strategy

    def admit_nearest(population, newcomer, capacity):
        if len(population) < capacity:
            population.append(newcomer)
            return None
        nearest = min(range(len(population)), key=lambda i: (sum(abs(a - b) for a, b in zip(population[i], newcomer)), i))
        if not newcomer.fitness.wvalues > population[nearest].fitness.wvalues:
            return newcomer
        leaving, population[nearest] = population[nearest], newcomer
        return leaving

    # (SteadyState.tell's shortcut stays right: a newcomer no better than the worst member is no better than its nearest)
    return _patched((strategy, "admit", admit_nearest))


def random_until_promoted():
    """EXPERIMENT (issue 33, ``evens-promotion-random-until-promoted``): with promotion, the GA proposes random genomes
    (random search under the same successive halving, as ``random-asha`` is) until every member of its population has
    been promoted at least once, then breeds. The product breeds as soon as the population holds ``population``
    results of any rung: children of networks trained one stage, which is when its population converges on one
    design (digits, signal)."""
    from evolve.search import strategy

    ask = strategy.SteadyState.ask

    def patched(self):
        if self.rungs and (len(self.population) < self.params.population or any(ind.fitness.values[0] < 1 for ind in self.population)):
            return self.random()
        return ask(self)

    return _patched((strategy.SteadyState, "ask", patched))


@contextlib.contextmanager
def _patched(*replacements):
    """Each (owner, name, value) set while the context is open (unittest.mock's patch.object), then restored."""
    with contextlib.ExitStack() as stack:
        for owner, name, value in replacements:
            stack.enter_context(mock.patch.object(owner, name, value))
        yield
