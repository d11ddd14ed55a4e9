"""The deployment configuration: one TOML file for every party of the helpers layout.

Every host runs its service from the same file (a client reads only its own
entry under ``[[clients]]``; those entries hold paths on that client's host)::

    [deployment]
    computing_parties = 3        # the server and 2 helpers
    provider = "ttp"             # a dealer of its own
    sort = "radix"
    timeout = 30                 # seconds a party waits for another during an evaluation
    join_timeout = 120           # seconds the services wait for each other at start-up
    score_timeout = 600          # seconds a client's scoring hook may take
    threads = 8                  # optional: each computing party's threads for its local work
                                 # (default: the cores its process may use)
    roster = "roster.json"       # written by: secure-auc roster

    [mechanism]                  # agreed at connection time: a difference is named
    name = "laplace"
    epsilon = 1.0
    allocation = "adaptive"

    [server]
    rendezvous = "10.0.0.1:29500"  # the computing parties and the dealer meet here (and on port + 1)
    clients = "10.0.0.1:29600"     # where the clients reach the server
    session = "127.0.0.1:29700"    # where the platform's MPCSession connects

    [[helpers]]
    clients = "10.0.0.2:29600"

    [[helpers]]
    clients = "10.0.0.3:29600"

    [[clients]]                    # client 0
    labels = "data/labels.csv"     # a column 'label' (0/1)
    scores = "scoring:score"       # module:function, or a file per evaluation: "scores/epoch{epoch}.npy" (.csv, ...)
    ledger = "privacy.db"          # optional: this client's own privacy ledger (SQLite, created if missing)
    budget = 10.0                  # optional, with ledger: the total eps allowed for each of its records
    id_column = "id"               # optional, with ledger: the labels file's column of record identifiers;
                                   # every release is then charged to each record (else to the labels as one dataset)

    [report]                       # optional: the whole evaluation (secure_auc.report) under the same eps
    metrics = ["roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss"]
    split = { auc = 0.5 }          # optional: shares of eps by release (auc, bands, calibration, log_loss, brier)
    bands = 100                    # optional: equal-frequency rank bands
    top_fractions = [0.01, 0.05]   # optional: precision and recall at these top fractions

Relative paths are relative to the configuration file's folder, which is also
put first on ``sys.path`` to import a client's hook.
"""

from __future__ import annotations

import math

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..mpc import RANK_METHODS
from ..validation import InputError, check_real, check_timeout

__all__ = ["DeployConfig", "ClientEntry", "load_config", "options_config", "parse_address", "parse_role",
           "reachable_config", "REPORT_KEYS"]

REPORT_KEYS = ("metrics", "split", "bands", "top_fractions", "head_fractions", "lift_bins", "calibration_bins",
               "clip")
_DEPLOYMENT_DEFAULTS = {"computing_parties": 3, "provider": "ttp", "sort": RANK_METHODS[0], "timeout": 60.0,
                        "join_timeout": 300.0, "score_timeout": 600.0}
DEPLOYMENT_DEFAULTS = _DEPLOYMENT_DEFAULTS  # [deployment]'s defaults, as the serve command's help states them


def parse_address(text, where: str) -> tuple[str, int]:
    """``"HOST:PORT"`` as (host, port); an InputError names ``where``."""
    host, _, port = str(text).rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"{where}: expected \"HOST:PORT\", got {text!r}")
    return host.strip("[]"), int(port)


def parse_role(text: str, computing: int, clients: int, dealer: bool) -> tuple[str, int]:
    """A role name as (kind, index): ``server``, ``helper-1`` (or ``helper1``), ``dealer``,
    ``client-0`` (or ``client0``)."""
    name = str(text).strip().lower().replace("_", "-")
    kind, index = name, 0
    for prefix in ("helper", "client"):
        if name.startswith(prefix) and name != prefix:
            tail = name[len(prefix):].lstrip("-")
            if not tail.isdigit():
                break
            kind, index = prefix, int(tail)
    ok = (kind == "server" or (kind == "dealer" and dealer) or (kind == "helper" and 1 <= index < computing)
          or (kind == "client" and 0 <= index < clients))
    if not ok:
        roles = ["server"] + [f"helper-{i}" for i in range(1, computing)] + (["dealer"] if dealer else []) \
            + [f"client-0..client-{clients - 1}"]
        raise InputError(f"--role {text!r} is not a role of this deployment ({', '.join(roles)})")
    return kind, index


@dataclass(frozen=True)
class ClientEntry:
    """One client's own settings (paths on its host)."""

    labels: Path | None
    label_column: str
    scores: str | None
    ledger: Path | None
    budget: float | None
    budget_delta: float
    id_column: str | None = None  # the labels file's column of record identifiers: charged per record


@dataclass(frozen=True)
class DeployConfig:
    """A parsed deployment configuration (:func:`load_config`)."""

    path: Path
    computing_parties: int
    provider: str
    sort: str
    timeout: float
    join_timeout: float
    score_timeout: float
    roster_path: Path
    mechanism_options: dict
    rendezvous: tuple[str, int]
    session_address: tuple[str, int]
    client_addresses: tuple  # computing party r's (host, port) for the clients, r = 0 (server), 1.. (helpers)
    listen: tuple  # computing party r's listening host (default: the host of its address)
    clients: tuple = field(default_factory=tuple)  # ClientEntry per client
    report_options: dict = field(default_factory=dict)  # the [report] table (REPORT_KEYS); empty: the AUC only
    threads: int | None = None  # each computing party's threads for its local work (None: the cores it may use)

    @property
    def dealer(self) -> bool:
        return self.provider == "ttp"

    def mechanism(self):
        """The mechanism of every evaluation (:func:`secure_auc.dp.make_mechanism`)."""
        from ..dp.registry import make_mechanism

        opts = dict(self.mechanism_options)
        name = opts.pop("name")
        return make_mechanism(name, opts.pop("epsilon", None), clients=len(self.clients), **opts)

    def report(self):
        """The report every evaluation releases with the AUC (``[report]``), or None (the AUC
        only): ``(auc_mechanism, plan, cost)`` as :func:`secure_auc.report.release.plan_report`
        and :func:`~secure_auc.report.release.report_plan` give them for the total mechanism."""
        if not self.report_options:
            return None
        from ..report.release import plan_report, report_plan
        from ..report.spec import ReportSpec

        opts = dict(self.report_options)
        names = {"top_fractions": "fractions", "head_fractions": "head", "split": "budget"}
        kwargs = {names.get(k, k): (tuple(v) if isinstance(v, list) else v) for k, v in opts.items() if k != "metrics"}
        spec = ReportSpec(opts.get("metrics", []), **kwargs)
        if spec.groups == ("auc",):
            return None
        total = self.mechanism().for_clients(len(self.clients))
        auc, epsilons, kind, cost = plan_report(total, spec)
        return auc, report_plan(spec, epsilons, kind, total, len(self.clients)), cost

    def auc_mechanism(self):
        """The AUC's mechanism: :meth:`mechanism`, or with a report its share of the eps."""
        report = self.report()
        return self.mechanism() if report is None else report[0]

    def charged(self):
        """What a client's ledger charges per evaluation: the mechanism, or with a report the
        AUC's and the report's releases composed (:class:`secure_auc.report.release.ReportCost`)."""
        report = self.report()
        return self.mechanism() if report is None else report[2]

    def agreed(self) -> dict:
        """What every party must have in common, compared at connection time (option -> value)."""
        out = {f"mechanism.{k}": v for k, v in sorted(self.mechanism_options.items())}
        out |= {f"report.{k}": v for k, v in sorted(self.report_options.items())}
        out |= {"deployment.computing_parties": self.computing_parties, "deployment.provider": self.provider,
                "deployment.sort": self.sort, "clients": len(self.clients)}
        return out

    def roster(self):
        """The roster of public keys, checked against this deployment."""
        from ..mpc.comm.roster import Roster

        if not self.roster_path.exists():
            raise InputError(f"{self.path}: roster {self.roster_path} does not exist (write it with secure-auc roster)")
        return Roster.load_helpers(self.roster_path, helpers=self.computing_parties - 1, clients=len(self.clients),
                                   dealer=self.dealer)

    def party_config(self):
        """The MPC parties' public parameters (:class:`secure_auc.mpc.party.PartyConfig`)."""
        from ..mpc.party import PartyConfig

        report = self.report()
        return PartyConfig(mechanisms=(self.mechanism() if report is None else report[0],), clients=len(self.clients),
                           provider=self.provider, sort=self.sort, progress=False, computing=self.computing_parties,
                           session=True, report=None if report is None else report[1])


def _table(data: dict, key: str, path: Path, required: bool = True) -> dict:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{path}: missing table [{key}]" if value is None else f"{path}: [{key}] must be a table")
    return value


def _unknown(table: dict, allowed, where: str, path: Path) -> None:
    extra = sorted(set(table) - set(allowed))
    if extra and not where:  # the file's top level holds tables ([deployment], [[clients]], ...)
        value = table[extra[0]]
        kind = (f"table [[{extra[0]}]]" if isinstance(value, list) and value and isinstance(value[0], dict)
                else f"table [{extra[0]}]" if isinstance(value, dict) else f"option {extra[0]} outside a table")
        raise InputError(f"{path}: unknown {kind} (known: [deployment], [mechanism], [server], [[helpers]], "
                         "[[clients]], [report])")
    if extra:
        raise InputError(f"{path}: unknown option {where}.{extra[0]} (known: {', '.join(allowed)})")


def _seconds(value, where: str, path: Path) -> float:
    return check_timeout(value, name=f"{path}: {where}")


def _text(table: dict, key: str, where: str, path: Path) -> None:
    """``table[key]``, if given, must be text (a path, a column's name, a hook): an InputError names the file."""
    if key in table and (not isinstance(table[key], str) or not table[key].strip()):
        raise InputError(f"{path}: {where} must be text (in quotes), got {table[key]!r}")


def _number(value, where: str, path: Path, *, low: float, low_open: bool, high: float | None = None,
            high_open: bool = True) -> float:
    """A finite number in the given range, as float; an InputError names the file and option."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and \
            (high is None or (value < high if high_open else value <= high))
    if not ok:
        left = "(" if low_open else "["
        right = "inf)" if high is None else (f"{high:g})" if high_open else f"{high:g}]")
        raise InputError(f"{path}: {where} must be a number in {left}{low:g}, {right}, got {value!r}")
    return float(value)


def load_config(path) -> DeployConfig:
    """Read and check a deployment configuration file.

    Parameters
    ----------
    path : str or pathlib.Path

    Returns
    -------
    DeployConfig

    Raises
    ------
    InputError
        One line naming the file and the option: unreadable or not TOML, a missing
        or unknown option, a value out of range, a mechanism
        :func:`secure_auc.dp.make_mechanism` refuses.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc.deploy import load_config
    >>> text = '''
    ... [deployment]
    ... computing_parties = 2
    ... [mechanism]
    ... name = "laplace"
    ... epsilon = 1.0
    ... [server]
    ... rendezvous = "10.0.0.1:29500"
    ... clients = "10.0.0.1:29600"
    ... session = "127.0.0.1:29700"
    ... [[helpers]]
    ... clients = "10.0.0.2:29600"
    ... [[clients]]
    ... [[clients]]
    ... '''
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "deploy.toml").write_text(text)
    ...     config = load_config(Path(tmp) / "deploy.toml")
    >>> config.client_addresses, len(config.clients), config.mechanism().describe()["allocation"]
    ((('10.0.0.1', 29600), ('10.0.0.2', 29600)), 2, 'adaptive')
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the configuration {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    _unknown(data, ("deployment", "mechanism", "server", "helpers", "clients", "report"), "", path)
    base = path.resolve().parent
    dep = dict(_DEPLOYMENT_DEFAULTS) | _table(data, "deployment", path, required=False)
    _unknown(dep, (*_DEPLOYMENT_DEFAULTS, "roster", "threads"), "deployment", path)
    w = dep["computing_parties"]
    if w not in (2, 3) or isinstance(w, bool):
        raise InputError(f"{path}: deployment.computing_parties must be 2 or 3, got {w!r}")
    if dep["provider"] not in ("ttp", "tfp"):
        raise InputError(f"{path}: deployment.provider must be \"ttp\" or \"tfp\", got {dep['provider']!r}")
    if dep["sort"] not in RANK_METHODS:
        raise InputError(f"{path}: deployment.sort must be one of {', '.join(RANK_METHODS)}, got {dep['sort']!r}")
    timeouts = {k: _seconds(dep[k], f"deployment.{k}", path) for k in ("timeout", "join_timeout", "score_timeout")}
    threads = None
    if "threads" in dep:
        from ..validation import check_threads

        if not isinstance(dep["threads"], int) or isinstance(dep["threads"], bool) or dep["threads"] < 1:
            raise InputError(f"{path}: deployment.threads must be a whole number at least 1, got {dep['threads']!r}")
        threads = check_threads(dep["threads"])

    _text(dep, "roster", "deployment.roster", path)
    mech = _mechanism_table(_table(data, "mechanism", path), path)

    server = _table(data, "server", path)
    _unknown(server, ("rendezvous", "clients", "session", "listen"), "server", path)
    for key in ("rendezvous", "clients", "session"):
        if key not in server:
            raise InputError(f"{path}: server.{key} is missing (\"HOST:PORT\")")
    helpers = data.get("helpers", [])
    if not isinstance(helpers, list) or len(helpers) != w - 1:
        raise InputError(f"{path}: {w} computing parties need {w - 1} [[helpers]] table(s), found "
                         f"{len(helpers) if isinstance(helpers, list) else 'no [[helpers]] list'}")
    addresses = [parse_address(server["clients"], f"{path}: server.clients")]
    listen = [server.get("listen", addresses[0][0])]
    for i, h in enumerate(helpers, start=1):
        if not isinstance(h, dict) or "clients" not in h:
            raise InputError(f"{path}: helper {i}: missing clients = \"HOST:PORT\"")
        _unknown(h, ("clients", "listen"), f"helpers[{i - 1}]", path)
        addresses.append(parse_address(h["clients"], f"{path}: helpers[{i - 1}].clients"))
        listen.append(h.get("listen", addresses[-1][0]))

    entries = data.get("clients")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: no [[clients]] table (one per client, in client order)")
    clients = []
    for k, c in enumerate(entries):
        if not isinstance(c, dict):
            raise InputError(f"{path}: clients[{k}] must be a table")
        _unknown(c, ("labels", "label_column", "id_column", "scores", "ledger", "budget", "budget_delta"),
                 f"clients[{k}]", path)
        for option in ("budget", "id_column"):
            if option in c and "ledger" not in c:
                raise InputError(f"{path}: clients[{k}].{option} needs clients[{k}].ledger")
        id_column = _id_column(c, k, path)
        for option in ("labels", "label_column", "scores", "ledger"):
            _text(c, option, f"clients[{k}].{option}", path)
        clients.append(ClientEntry(
            labels=base / c["labels"] if "labels" in c else None, label_column=str(c.get("label_column", "label")),
            scores=str(c["scores"]) if "scores" in c else None,
            ledger=base / c["ledger"] if "ledger" in c else None,
            budget=_number(c["budget"], f"clients[{k}].budget", path, low=0, low_open=True) if "budget" in c else None,
            budget_delta=_number(c.get("budget_delta", 0.0), f"clients[{k}].budget_delta", path, low=0,
                                 low_open=False, high=1), id_column=id_column))
    report_options = _table(data, "report", path, required=False)
    _unknown(report_options, REPORT_KEYS, "report", path)
    if "split" in report_options and not isinstance(report_options["split"], dict):
        raise InputError(f"{path}: report.split must be a table of RELEASE = SHARE (auc, bands, calibration, "
                         "log_loss, brier)")
    report_options = {k: (dict(v) if isinstance(v, dict) else v) for k, v in report_options.items()}
    config = DeployConfig(
        path=path, computing_parties=w, provider=dep["provider"], sort=dep["sort"], roster_path=base / dep.get(
            "roster", "roster.json"), mechanism_options=mech,
        rendezvous=parse_address(server["rendezvous"], f"{path}: server.rendezvous"),
        session_address=parse_address(server["session"], f"{path}: server.session"), client_addresses=tuple(addresses),
        listen=tuple(listen), clients=tuple(clients), report_options=report_options, threads=threads, **timeouts)
    try:
        config.mechanism().check_release()
    except (InputError, ValueError, TypeError) as exc:  # make_mechanism's checks, and any it leaves to Python
        raise InputError(f"{path}: [mechanism]: {exc}") from None
    check_report(config, path)
    return config


def _mechanism_table(mech: dict, path: Path) -> dict:
    """The ``[mechanism]`` table checked against its family's declaration (:mod:`secure_auc.dp.family`):
    ``name`` one of the families, every other key one of that family's options, of its type (a number,
    or one of its choices), the family's defaults filled in (except epsilon and delta, which the
    mechanism requires as its own)."""
    from ..dp.family import UNIVERSAL
    from ..dp.registry import FAMILIES, families, family

    if "name" not in mech:
        raise InputError(f"{path}: mechanism.name is missing ({', '.join(FAMILIES)})")
    if mech["name"] not in FAMILIES:
        raise InputError(f"{path}: mechanism.name must be one of {', '.join(FAMILIES)}, got {mech['name']!r}")
    fam = family(mech["name"])
    for key in sorted(set(mech) - {"name"}):
        if not fam.takes(key):
            takers = [f.name for f in families() if f.takes(key)]
            if not takers:
                _unknown({key: None}, ("name", *(o.name for o in fam.options)), "mechanism", path)
            raise InputError(f"{path}: mechanism.{key} does not apply to the mechanism {fam.name!r}, only to "
                             f"{', '.join(takers)}")
        opt = fam.option(key)
        if opt.type is str:
            if not isinstance(mech[key], str) or (opt.choices and mech[key] not in opt.choices):
                raise InputError(f"{path}: mechanism.{key} must be "
                                 + (f"one of {', '.join(opt.choices)}" if opt.choices else "text") + f", got {mech[key]!r}")
        else:
            check_real(mech[key], f"{path}: mechanism.{key}")
    values = fam.resolve({k: v for k, v in mech.items() if k != "name"})
    for key in sorted(set(mech) - {"name"}):  # as --alpha without --allocation split is refused on the command line
        opt = fam.option(key)
        if not opt.applies(values):
            other, allowed = opt.when
            raise InputError(f"{path}: mechanism.{key} does not apply to {other} = {values.get(other)!r}, only to "
                             + " or ".join(f"{other} = {a!r}" for a in allowed))
    defaults = {o.name: o.default for o in fam.options if o.name not in UNIVERSAL and o.default is not None}
    return {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) else v)
            for k, v in (defaults | mech).items()}


def _id_column(entry: dict, k: int, path) -> str | None:
    """Client ``k``'s ``id_column``: a column name of its labels file (CSV or Parquet), or None."""
    if "id_column" not in entry:
        return None
    name = entry["id_column"]
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{path}: clients[{k}].id_column must be the name of a column of its labels file, "
                         f"got {name!r}")
    if str(entry.get("labels", "")).endswith(".npy"):
        raise InputError(f"{path}: clients[{k}].id_column needs labels in a CSV or Parquet file with that column "
                         "(a .npy array has no columns)")
    return name


def check_report(config: DeployConfig, where) -> None:
    """The report's options, checked now (an InputError names ``where`` and [report])."""
    if not config.report_options:
        return
    try:
        report = config.report()
        if report is not None:
            from ..report.release import check_report_range

            check_report_range(report[1].spec, report[1].eps, len(config.clients), 2 ** 31)
    except (InputError, ValueError, TypeError) as exc:
        raise InputError(f"{where}: [report]: {exc}") from None


def options_config(*, computing_parties: int, clients: int, mechanism: dict, roster, client_addresses,
                   provider: str = "ttp", sort: str = RANK_METHODS[0], timeout: float = 60.0, listen=None,
                   rendezvous: tuple[str, int] = ("127.0.0.1", 0), report: dict | None = None,
                   threads: int | None = None) -> DeployConfig:
    """The deployment that command-line options describe (``python -m secure_auc.cli.compute``
    under torchrun, ``secure-auc client``): the same :class:`DeployConfig` a file gives, so
    both run the services' code and agree on it at connection time.

    ``mechanism``: a ``[mechanism]`` table, the family's name and options (None values left out);
    ``client_addresses``: computing party r's (host, port) for the clients; every wait, the
    start-up's and the scoring's included, is bounded by ``timeout``; ``report``: a ``[report]``
    table (:data:`REPORT_KEYS`; default: the AUC only).  No client entry holds
    paths: a client hands its inputs to :func:`.service.run_client_service` itself."""
    timeout = check_timeout(timeout)
    mech = {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) else v)
            for k, v in mechanism.items() if v is not None}
    addresses = tuple(tuple(a) for a in client_addresses)
    hosts = listen if listen is not None else [a[0] for a in addresses]
    entry = ClientEntry(labels=None, label_column="label", scores=None, ledger=None, budget=None, budget_delta=0.0)
    config = DeployConfig(path=Path("<command line>"), computing_parties=computing_parties, provider=provider,
                          sort=sort, timeout=float(timeout), join_timeout=float(timeout), score_timeout=float(timeout),
                          roster_path=Path(roster), mechanism_options=mech, rendezvous=tuple(rendezvous),
                          session_address=("127.0.0.1", 0), client_addresses=addresses, listen=tuple(hosts),
                          clients=(entry,) * clients, report_options=dict(report or {}), threads=threads)
    check_report(config, "the command line")
    return config


def reachable_config(path) -> DeployConfig | None:
    """What a party whose configuration ``path`` fails its checks still needs to tell the others why
    it cannot start (:func:`.service.refuse_to_start`): the layout, the addresses, the roster and
    the timeouts of a file that parses as TOML, each value that is wrong replaced by its default,
    and no mechanism; None when the file does not parse or its addresses cannot be read.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> text = '''
    ... [deployment]
    ... computing_parties = 2
    ... join_timeout = "soon"
    ... [server]
    ... rendezvous = "10.0.0.1:29500"
    ... clients = "10.0.0.1:29600"
    ... [[helpers]]
    ... clients = "10.0.0.2:29600"
    ... [[clients]]
    ... '''
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "deploy.toml").write_text(text)
    ...     config = reachable_config(Path(tmp) / "deploy.toml")
    >>> config.rendezvous, config.client_addresses, len(config.clients), config.join_timeout
    (('10.0.0.1', 29500), (('10.0.0.1', 29600), ('10.0.0.2', 29600)), 1, 300.0)
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        dep = data.get("deployment", {})
        dep = dep if isinstance(dep, dict) else {}
        w = dep.get("computing_parties", _DEPLOYMENT_DEFAULTS["computing_parties"])
        provider = dep.get("provider", "ttp") if dep.get("provider") in ("ttp", "tfp") else "ttp"
        server, helpers, clients = data["server"], data.get("helpers", []), data.get("clients", [])
        if w not in (2, 3) or isinstance(w, bool) or not isinstance(helpers, list) or len(helpers) != w - 1 \
                or not isinstance(clients, list) or not clients:
            return None
        addresses = [parse_address(server["clients"], "server.clients")]
        addresses += [parse_address(h["clients"], "helpers.clients") for h in helpers]
        listen = [server.get("listen", addresses[0][0])]
        listen += [h.get("listen", a[0]) for h, a in zip(helpers, addresses[1:])]
        rendezvous = parse_address(server["rendezvous"], "server.rendezvous")
        session = parse_address(server.get("session", "127.0.0.1:1"), "server.session")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, InputError, KeyError, TypeError, AttributeError):
        return None

    def seconds(key):
        try:
            return _seconds(dep.get(key, _DEPLOYMENT_DEFAULTS[key]), key, path)
        except InputError:
            return _DEPLOYMENT_DEFAULTS[key]

    from ..dp.families.none import FAMILY as NO_NOISE  # nothing is computed: the refusal needs no mechanism

    entry = ClientEntry(labels=None, label_column="label", scores=None, ledger=None, budget=None, budget_delta=0.0)
    return DeployConfig(path=path, computing_parties=w, provider=provider, sort=_DEPLOYMENT_DEFAULTS["sort"],
                        roster_path=path.resolve().parent / str(dep.get("roster", "roster.json")),
                        mechanism_options={"name": NO_NOISE.name}, rendezvous=rendezvous, session_address=session,
                        client_addresses=tuple(addresses), listen=tuple(listen), clients=(entry,) * len(clients),
                        timeout=seconds("timeout"), join_timeout=seconds("join_timeout"),
                        score_timeout=seconds("score_timeout"))
