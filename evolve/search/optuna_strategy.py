"""``search.mode = "optuna"``: an Optuna sampler proposes the networks; evens trains them (MPI, isolation, the run
file, the ensemble). Needs ``pip install "evens[optuna]"``.

Optuna's samplers see the space's native genes, as a user's Optuna study would: each active gene is a
categorical, an integer or a float (log where the gene is), suggested define-by-run so that a conditional gene
(a CNN's kernel size, say) exists only where its condition holds. ``search.sampler`` picks the sampler: ``tpe``
(multivariate, grouped for the conditional genes, with a constant liar for the trainings still out), ``gp``,
``cmaes`` (categorical genes sampled independently) or ``random``. The proposal is stored as a genome like any
other (:meth:`~evolve.search.space.SearchSpace.encode`), so records, the run file and the report are the same
as for the evolutionary strategies.

Nothing of Optuna goes into the run file: on resume the study is rebuilt in memory from the records (each
network a finished trial, its fitness the value; a failed or crashed one a failed trial) and the pending
networks (running trials), and the sampler is seeded afresh from the search's rng. A proposal that decodes to a
network trained before is answered from its record and drawn again (up to :data:`REDRAWS` times), so that
no network is trained twice. With successive halving (``search.promotion``) a network is one trial, told its
first stage's fitness (at the lowest rung, as every network has one); its promotions are the engine's business.
"""
from __future__ import annotations

import collections
import math
import warnings

from .records import Record
from .registry import Capabilities, Context, register
from .space import Choice, SearchSpace

SAMPLERS = ("tpe", "gp", "cmaes", "random")
NEEDS = {"tpe": ("optuna",), "gp": ("optuna", "scipy"), "cmaes": ("optuna", "cmaes"), "random": ("optuna",)}
REDRAWS = 20  # draws of a network not proposed before, before a repeat is trained all the same


def missing(sampler: str) -> list[str]:
    """The modules ``sampler`` needs that cannot be imported."""
    import importlib.util

    return [m for m in NEEDS.get(sampler, ("optuna",)) if importlib.util.find_spec(m) is None]


def _sampler(optuna, name: str, seed: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)
        if name == "gp":
            return optuna.samplers.GPSampler(seed=seed)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        return optuna.samplers.RandomSampler(seed=seed)


def _distributions(optuna, space: SearchSpace) -> dict:
    """Each gene's Optuna distribution; None for a gene with one value (never suggested: it has no choice)."""
    out = {}
    for gene in space.genes:
        d = gene.domain
        if isinstance(d, Choice):
            out[gene.name] = optuna.distributions.CategoricalDistribution(list(d.options)) if len(d.options) > 1 else None
        elif d.low == d.high:
            out[gene.name] = None
        elif d.integer:
            out[gene.name] = optuna.distributions.IntDistribution(int(d.low), int(d.high), log=d.log)
        else:
            out[gene.name] = optuna.distributions.FloatDistribution(d.low, d.high, log=d.log)
    return out


@register
class OptunaSampler:
    """A study in memory whose trials are the search's networks (see the module's docstring)."""

    name = mode = "optuna"
    capabilities = Capabilities(barrier=False, order_matters=True, promotion=True, needs="optuna")  # (promotion: told each network's first stage)

    @classmethod
    def check(cls, params) -> str | None:
        """Why this search cannot run here (a missing dependency), or None."""
        sampler = getattr(params, "sampler", "tpe")
        if sampler not in SAMPLERS:
            return f"search.sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}"
        gone = missing(sampler)
        if gone:
            return (f"search.mode = \"optuna\" with search.sampler = \"{sampler}\" needs {', '.join(gone)}: "
                    f"pip install \"evens[optuna]\"")
        return None

    @classmethod
    def create(cls, context: Context) -> OptunaSampler:
        problem = cls.check(context.params)
        if problem:
            raise ValueError(problem)
        return cls(context)

    def __init__(self, context: Context):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna, self.space = optuna, context.space
        self.sampler_name = getattr(context.params, "sampler", "tpe")
        self.distributions = _distributions(optuna, context.space)
        self.study = optuna.create_study(direction="maximize", sampler=_sampler(optuna, self.sampler_name, context.rng.randrange(2**31)))
        self.out: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)  # genome -> its running trials
        self.fitness_of: dict[tuple, float] = {}  # a recorded network's key -> its fitness (nan: it failed)
        self.pending_keys: set[tuple] = set()
        for record in sorted(context.records, key=lambda r: r.id):
            if record.network < 0:  # (a promoted network's later stages are not trials of their own: see tell)
                self.study.add_trial(self._finished(record))
            self.fitness_of[context.space.key(record.genome)] = self._value(record)
        for individual in sorted(context.pending, key=lambda p: p.id):
            if individual.network >= 0:
                continue
            self.study.enqueue_trial(self._params(individual.genome))
            self._hold(individual.genome, self.study.ask(self._active_distributions(individual.genome)))

    # --- genomes and trials ----------------------------------------------------------------------------

    def _params(self, genome) -> dict:
        """The genome's suggested genes: the active ones that have a choice."""
        return {k: v for k, v in self.space.decode(genome).items() if self.distributions.get(k) is not None}

    def _active_distributions(self, genome) -> dict:
        return {k: self.distributions[k] for k in self._params(genome)}

    @staticmethod
    def _value(record: Record) -> float:
        """What the study learns from a record: its fitness (a stopped network's too: a low one; with successive halving,
        a first stage's at its rung), nan if it has none."""
        return record.fitness if record.status in ("ok", "stopped", "paused") and math.isfinite(record.fitness) else math.nan

    def _finished(self, record: Record):
        value, optuna = self._value(record), self.optuna
        done = {"value": value} if math.isfinite(value) else {"state": optuna.trial.TrialState.FAIL}
        params = self._params(record.genome)
        return optuna.trial.create_trial(params=params, distributions={k: self.distributions[k] for k in params}, **done)

    def _tell(self, trial, value: float) -> None:
        """The trial finished with ``value``, or failed (nan)."""
        if math.isfinite(value):
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)

    def _hold(self, genome, trial) -> None:
        self.out[tuple(genome)].append(trial)
        self.pending_keys.add(self.space.key(genome))

    # --- the strategy's verbs --------------------------------------------------------------------------

    def ask(self):
        from .strategy import Proposal

        for draw in range(REDRAWS + 1):
            trial = self.study.ask()
            genome = self.space.encode(suggest(trial, self.space))
            key = self.space.key(genome)
            if draw == REDRAWS or (key not in self.fitness_of and key not in self.pending_keys):
                break
            self._tell(trial, self.fitness_of.get(key, math.nan))  # a repeat: answered from its record, or failed if still out
        self._hold(genome, trial)
        return Proposal(genome=genome, parents=(-1, -1), operators=f"optuna-{self.sampler_name}", key=key)

    def tell(self, record: Record) -> None:
        waiting = self.out.get(tuple(record.genome))
        key = self.space.key(record.genome)
        value = self._value(record)
        self.fitness_of[key] = value
        self.pending_keys.discard(key)
        if not waiting:  # not asked in this session and not pending at its start: nothing to tell
            return
        trial = waiting.popleft()
        if not waiting:
            del self.out[tuple(record.genome)]
        self._tell(trial, value)

    def to_state(self) -> dict:
        return {"mode": self.mode, "sampler": self.sampler_name}


def suggest(trial, space: SearchSpace) -> dict:
    """Define-by-run over the space's native genes, in :attr:`~evolve.search.space.SearchSpace.condition_order`:
    each gene whose conditions hold and that has a choice is suggested to ``trial`` (categorical, or int or float
    with its log flag), a gene of one value takes it. The active genes' values (an inactive gene is left out, as
    :meth:`~evolve.search.space.SearchSpace.decode` leaves it out)."""
    values, active = {}, {}
    for gene in space.condition_order:
        on = all(active[other] and values[other] in allowed for other, allowed in gene.conditions())
        active[gene.name] = on
        d = gene.domain
        if not on:
            values[gene.name] = gene.default  # (what the conditions of genes after it test)
        elif isinstance(d, Choice):
            values[gene.name] = d.options[0] if len(d.options) == 1 else trial.suggest_categorical(gene.name, list(d.options))
        elif d.low == d.high:
            values[gene.name] = int(d.low) if d.integer else d.low
        elif d.integer:
            values[gene.name] = trial.suggest_int(gene.name, int(d.low), int(d.high), log=d.log)
        else:
            values[gene.name] = trial.suggest_float(gene.name, d.low, d.high, log=d.log)
    return {name: v for name, v in values.items() if active[name]}
