"""The one interface a mechanism family declares: its name, its options, how it is built.

A family is declared once, in its own module (:mod:`.families.none`,
:mod:`.families.rr`, :mod:`.families.laplace`, :mod:`.families.gaussian`,
:mod:`.distributed`), and collected by :mod:`.registry`.  Everything that
handles a family reads that declaration:

* ``secure-auc`` (:mod:`secure_auc.cli`) makes its ``--mechanism`` choices, the
  option flags, their help and their defaults from it, and refuses an option
  the chosen family does not take;
* a deployment file's ``[mechanism]`` table (:mod:`secure_auc.deploy.config`) is
  checked against the same options;
* the registry builds the mechanism (:func:`.registry.make_mechanism`), whose
  noise, variance and privacy event (:class:`.base.Mechanism`) come from the
  family's module;
* the privacy ledger (:mod:`.accountant`) asks whether a family's noise comes
  from the seeded noise keys (a seed is then never used twice) or whether it
  flips labels (randomized response: the same flips may be reused for free);
* the simulator (:mod:`secure_auc.simulation.engine`) asks whether a family
  flips labels and whether the paper's closed forms describe its noise.

Examples
--------
>>> from secure_auc.dp.family import Family, Option
>>> from secure_auc.dp.mechanisms import StatisticsMechanism
>>> share = Option("share", "share of eps on localP", default=0.5, range="(0, 1)")
>>> toy = Family("toy", "Laplace noise, shared beta", (share,),
...              make=lambda epsilon, delta, clients, share: StatisticsMechanism(
...                  epsilon, delta=delta, allocation="orthogonal", beta=share))
>>> toy.build(1.0, share=None).beta, toy.build(1.0, share=0.25).beta
(0.5, 0.25)
>>> toy.refusal("alpha", {})
'to --mechanism toy'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Option", "Family", "EPSILON", "UNIVERSAL"]


@dataclass(frozen=True)
class Option:
    """One option of a family (``--NAME`` on the command line, ``NAME`` in ``[mechanism]``).

    Parameters
    ----------
    name : str
        The Python name (``honest_fraction``; the flag is ``--honest-fraction``).
    help : str
        What it does, for ``--help`` (its default and range are added).
    type : type, default float
        ``float`` or ``str``.
    default : optional
        The value used where the option applies and is not given (None: no default).
    choices : tuple of str, optional
        The values a text option takes.
    range : str, optional
        The range of a number, as the help states it (the mechanism checks it).
    when : tuple, optional
        ``(other, values)``: the option applies only when the option ``other`` has one of
        ``values`` (``("allocation", ("split",))``).
    cli : bool, default True
        False: taken by the deployment file and the Python API only, not by ``secure-auc``.
    """

    name: str
    help: str
    type: type = float
    default: Any = None
    choices: tuple = ()
    range: str = ""
    when: tuple | None = None
    cli: bool = True

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def applies(self, values: dict) -> bool:
        """Whether the option applies given the other options' ``values`` (defaults filled in)."""
        return self.when is None or values.get(self.when[0]) in self.when[1]

    def refusal(self, values: dict) -> str:
        """Why it does not apply, for ``{flag} does not apply {refusal}``."""
        other, allowed = self.when
        flag = "--" + other.replace("_", "-")
        return f"to {flag} {values.get(other)}, only to {flag} {' or '.join(allowed)}"

    def describe(self) -> str:
        """The help text with the range, the condition and the default."""
        text = self.help + (f", in {self.range}" if self.range else "")
        if self.when is not None:
            text += f"; with --{self.when[0].replace('_', '-')} {' or '.join(self.when[1])} only"
        return text + (f". Default: {self.default}" if self.default is not None else "")


EPSILON = Option("epsilon", "privacy budget eps per evaluation", default=1.0, range="[1e-6, 1e4]")
UNIVERSAL = ("epsilon", "delta")  # handed to every family's make (a family without them ignores or refuses them)


@dataclass(frozen=True)
class Family:
    """A mechanism family: its name, its options and how to build it.

    Parameters
    ----------
    name : str
        What ``--mechanism`` and ``[mechanism] name`` take, and the mechanism's ``name``.
    summary : str
        One line for ``--help``.
    options : tuple of Option
        The options it takes (``epsilon`` and ``delta`` included when it takes them).
    make : callable
        ``make(epsilon, delta, clients, **options) -> Mechanism`` with every option of
        ``options`` other than epsilon and delta, defaults filled in.
    notes : dict, optional
        Why an option it does not take does not apply, by option name (``"*"``: every option):
        ``{"*": "exact, no noise"}``.
    private : bool, default True
        False for the exact computation (no budget, no noise, no seed).
    needs_secure_sum : bool, default False
        Its noise protects only the aggregate: MPC protocol only.
    seeded_noise : bool, default True
        Its noise comes from the seeded noise keys: a ledger refuses a seed used before.
    flips_labels : bool, default False
        It flips labels (randomized response): one seed's flips at one eps may be reused.
    paper_closed_forms : bool, default False
        The paper's closed-form standard deviations (and its exact-P variant) describe its noise.
    noise : str, optional
        The per-client noise it adds (:func:`.noise.noise_kind`), for the paper's methods
        (``global`` ...) to be built with it.
    """

    name: str
    summary: str
    options: tuple = ()
    make: Callable = field(default=None, compare=False, repr=False)
    notes: dict = field(default_factory=dict, compare=False)
    private: bool = True
    needs_secure_sum: bool = False
    seeded_noise: bool = True
    flips_labels: bool = False
    paper_closed_forms: bool = False
    noise: str | None = None

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def takes(self, name: str) -> bool:
        return self.option(name) is not None

    def resolve(self, values: dict) -> dict:
        """``values`` (None: not given) of this family's options with the defaults filled in,
        in declaration order, each option a default or a choice depends on resolved first."""
        out = {}
        for o in self.options:
            v = values.get(o.name)
            out[o.name] = o.default if v is None else v
        return out

    def refusal(self, name: str, values: dict) -> str:
        """Why the option ``name`` does not apply to this family with ``values``, for
        ``{flag} does not apply {refusal}``."""
        opt = self.option(name)
        if opt is not None:
            return opt.refusal(values)
        note = self.notes.get(name, self.notes.get("*"))
        return f"to --mechanism {self.name}" + (f" ({note})" if note else "")

    def build(self, epsilon: float | None = None, *, delta: float | None = None, clients: int | None = None,
              **options):
        """The mechanism: ``make`` with this family's options (others ignored), defaults filled in."""
        own = self.resolve({k: v for k, v in options.items() if self.takes(k)})
        own.pop("epsilon", None)
        own.pop("delta", None)
        return self.make(epsilon, delta, clients, **own)


@dataclass(frozen=True)
class MechanismChoice:
    """A family with its options checked and completed: the mechanism a command line asks for,
    read once (:func:`secure_auc.cli.mechanism_choice`) and handed down as a value.

    ``family``: its declaration; ``values``: the family's options with its defaults filled in
    (with ``evaluations``, ``epsilon``/``delta`` are the totals of the T evaluations); ``given``:
    the options given (name -> value, for the torchrun parties); ``total``: the (eps, delta) of
    the plan of ``evaluations`` = T evaluations, else None (checked when made:
    :func:`.planning.check_plan`)."""

    family: Family
    values: dict
    given: dict
    total: tuple | None = None
    evaluations: int | None = None

    def __post_init__(self):
        if self.total is not None:
            from .planning import check_plan

            check_plan(self.evaluations, *self.total)

    def mechanism(self, clients: int | None = None, *, epsilon: float | None = None, delta: float | None = None):
        """The mechanism (``epsilon``/``delta``: a planned evaluation's own)."""
        values = dict(self.values)
        eps, d = values.pop("epsilon", None), values.pop("delta", None)
        if epsilon is not None:
            eps, d = epsilon, (delta if d is not None else None)  # delta per evaluation: the family's own only
        return self.family.build(eps, delta=d, clients=clients, **values)

    def plan(self, clients: int, *, total: int | None = None, progress=None):
        """The :class:`.planning.Plan` of the ``evaluations`` within :attr:`total`, for ``clients``
        clients and ``total`` samples (``progress(step, steps)`` after each step)."""
        from .planning import search_plan

        return search_plan(lambda e, d: self.mechanism(clients, epsilon=e, delta=d), self.evaluations,
                           *self.total, total=total, iterations=14, progress=progress)

    def table(self) -> dict:
        """As a deployment configuration's ``[mechanism]`` table (every value set)."""
        return {"name": self.family.name} | {k: v for k, v in self.values.items() if v is not None}

    def argv(self) -> list[str]:
        """The options as given on the command line (for the torchrun parties)."""
        out = ["--mechanism", self.family.name]
        for name, value in self.given.items():
            out += ["--" + name.replace("_", "-"), str(value)]
        return out
