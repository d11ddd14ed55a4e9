"""Privacy events, their composition with dp-accounting, the ledger's API and planning."""

import json
import math
import multiprocessing
import re

import numpy as np
import pytest

from secure_auc import make_mechanism
from secure_auc.cli import main
from secure_auc.cli.ledger import main as ledger_main
from secure_auc.dp.accountant import Ledger, label_commitment
from secure_auc.dp.events import compose, gaussian_event, pure_event, skellam_zcdp, zcdp_event
from secure_auc.dp.distributed import skellam_rdp
from secure_auc.dp.noise import analytic_gaussian_sigma
from secure_auc.dp.planning import plan_evaluations
from secure_auc.validation import InputError

DS = label_commitment([0, 1, 1, 0, 1, 0])
DS2 = label_commitment([1, 1, 0, 0])


# ---- composition ---------------------------------------------------------------------------------
def test_pure_events_at_delta_zero_add_up():
    c = compose([pure_event(0.3), pure_event(0.7), pure_event(1.0)], 0.0)
    assert (c.epsilon, c.accountant) == (pytest.approx(2.0), "basic")


def test_gaussian_composition_matches_the_analytic_gaussian():
    """T Gaussians with noise multiplier s compose exactly to one with s / sqrt(T) (reference: Balle-Wang)."""
    s, t, delta = 20.0, 100, 1e-6
    c = compose([gaussian_event(s)] * t, delta)
    # the eps at which the analytic Gaussian's sigma for sensitivity 1 equals s / sqrt(T)
    lo, hi = 1e-3, 50.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if float(analytic_gaussian_sigma(mid, delta)) <= s / math.sqrt(t) else (mid, hi)
    assert c.accountant == "pld"
    assert c.epsilon == pytest.approx(hi, rel=0.01)
    assert c.rdp > c.pld  # RDP is the looser of the two for Gaussians


def test_pure_events_compose_to_about_sqrt_t():
    """100 eps = 0.1 releases: PLD much below basic (10), and above the advanced-composition lower bound."""
    c = compose([pure_event(0.1)] * 100, 1e-6)
    assert c.basic == (pytest.approx(10.0), 0.0)
    # Kairouz-Oh-Viswanath: eps_T >= T eps (e^eps - 1)/(e^eps + 1), and the RR-PLD is the optimal composition
    assert 100 * 0.1 * math.tanh(0.05) < c.epsilon < 5.0


def test_skellam_event_bounds_the_skellam_rdp():
    mu, d = 3.0e4, 40.0
    ev = skellam_zcdp(mu, d)
    alphas = np.array([1.5, 2, 10, 100, 1000])
    assert np.all(ev["xi"] + ev["rho"] * alphas >= skellam_rdp(alphas, mu, d) - 1e-15)


@pytest.mark.parametrize("name, kwargs", [("rr", {}), ("laplace", {"allocation": "split"}),
                                          ("laplace", {"allocation": "adaptive"}),
                                          ("gaussian", {"delta": 1e-6, "allocation": "adaptive"}),
                                          ("gaussian", {"delta": 1e-6, "allocation": "orthogonal"}),
                                          ("distributed", {"clients": 4}),
                                          ("distributed", {"clients": 4, "delta": 1e-6}),
                                          ("distributed", {"clients": 4, "delta": 1e-6, "noise": "gaussian"})])
def test_one_evaluation_spends_at_most_its_nominal_budget(name, kwargs):
    mech = make_mechanism(name, 0.8, **kwargs)
    cost = mech.cost
    c = compose([mech.privacy_event(10_000)], cost.delta or 1e-6, [(cost.epsilon, cost.delta)])
    assert c.epsilon <= cost.epsilon * (1 + 1e-9)
    # and the event is not vacuous: the accountants find it costs more than a tenth of it
    assert max(v for v in (c.rdp, c.pld) if v is not None) > 0.1 * cost.epsilon


# ---- ledger API ------------------------------------------------------------------------------------
def test_reserve_records_and_persists(tmp_path):
    path = tmp_path / "ledger.db"
    led = Ledger(path)
    led.set_budget(3.0, 1e-5)
    led.finish(led.reserve([DS], make_mechanism("laplace", 1.0)))
    led.finish(led.reserve([DS, DS2], make_mechanism("gaussian", 0.5, delta=1e-6)))
    again = Ledger(path)
    s = again.spent(DS)
    assert s.releases == 2 and (s.basic_epsilon, s.basic_delta) == (1.5, 1e-6)
    assert s.epsilon <= 1.5
    assert again.spent(DS2).releases == 1 and again.spent(label_commitment([0])).releases == 0
    assert again.budget() == {"epsilon": 3.0, "delta": 1e-5}
    rel = again.releases()
    assert [(r["evaluation"], r["client"], r["mechanism"]) for r in rel] == [(1, 0, "laplace"), (2, 0, "gaussian"),
                                                                             (2, 1, "gaussian")]
    assert all(r["state"] == "released" for r in rel)


def test_refuses_a_run_over_budget_and_records_nothing(tmp_path):
    led = Ledger(tmp_path / "l.db")
    led.set_budget(2.0)
    led.reserve([DS], make_mechanism("laplace", 1.5))
    with pytest.raises(InputError, match=r"would be exceeded for client 1's dataset: spent eps = 1.5 in 1 "
                                         r"release\(s\); with this run eps = 2.5 \(basic\); budget eps = 2"):
        led.reserve([DS2, DS], make_mechanism("laplace", 1.0))
    assert Ledger(tmp_path / "l.db").spent(DS2).releases == 0  # all clients or none
    led.reserve([DS], make_mechanism("laplace", 0.5))  # exactly the budget


def test_the_ledger_uses_the_tightest_accountant_against_the_budget(tmp_path):
    """100 evaluations at eps = 0.15 fit (10, 1e-6) by PLD, where basic composition would stop at 66."""
    led = Ledger(tmp_path / "l.db")
    led.set_budget(10.0, 1e-6)
    mech = make_mechanism("rr", 0.15)
    for _ in range(100):
        led.reserve([DS], mech)
    s = led.spent(DS)
    assert s.accountant == "pld" and s.basic_epsilon == pytest.approx(15.0) and s.epsilon < 10.0


def test_rr_with_the_same_flips_is_charged_once(tmp_path):
    led = Ledger(tmp_path / "l.db")
    led.set_budget(1.0)
    mech = make_mechanism("rr", 1.0)
    y = np.array([0, 1, 1, 0, 1, 0])
    led.reserve([y], mech, seed=3, sizes=[6])
    res = led.reserve([y], mech, seed=3, sizes=[6])  # same labels in the same order, seed, eps, size: the same flips
    assert res.spent[0].epsilon == pytest.approx(1.0) and res.spent[0].releases == 2
    for data, kwargs in ((y, dict(seed=4, sizes=[6])), (y, dict(seed=3)), (y, dict(sizes=[6])),
                         (y[::-1], dict(seed=3, sizes=[6])),  # the same labels reordered: other flips
                         (DS, dict(seed=3, sizes=[6]))):  # the identity alone says nothing of the order
        with pytest.raises(InputError, match="would be exceeded"):
            led.reserve([data], mech, **kwargs)


def test_a_noise_seed_is_not_reused_and_is_stored_keyed(tmp_path):
    """The seed is kept as a tag under the ledger's key: an unsalted hash of a small seed, as earlier
    versions kept, is found by trying every candidate."""
    import hashlib

    path = tmp_path / "l.db"
    led = Ledger(path)
    led.reserve([DS], make_mechanism("laplace", 1.0), seed=7)
    with pytest.raises(InputError, match="this seed was already used for laplace noise"):
        led.reserve([DS], make_mechanism("distributed", 1.0, clients=1), seed=7, total=6)
    led.reserve([DS], make_mechanism("laplace", 1.0), seed=8)
    led.reserve([DS2], make_mechanism("laplace", 1.0), seed=7)
    raw = path.read_bytes()
    for guess in range(1000):  # the earlier seed record: BLAKE2b of the seed alone
        tag = hashlib.blake2b(f"secure-auc seed|{guess}".encode(), digest_size=12).hexdigest()
        assert tag.encode() not in raw
    other = Ledger(tmp_path / "m.db")
    other.reserve([DS], make_mechanism("laplace", 1.0), seed=7)
    tags = {r["seed_tag"] for r in led.releases() + other.releases()}
    assert len(tags) == 3 and None not in tags  # 7 and 8 here, 7 under the other ledger's key
    assert all(re.fullmatch("[0-9a-f]{32}", t) for t in tags)  # a keyed tag in every record, never the seed


def _records(i):
    """Overlapping windows of records: window i holds ids 100 i .. 100 i + 299."""
    from secure_auc import ClientData

    ids = np.arange(100 * i, 100 * i + 300)
    return ClientData(np.zeros(300), (ids % 4 == 0).astype(np.int8), ids=ids)


def _reserve_one(path, data):
    try:
        Ledger(path).reserve([data], make_mechanism("laplace", 0.5))
        return True
    except InputError:
        return False


@pytest.mark.parametrize("records", [False, True])
def test_concurrent_runs_cannot_overspend(tmp_path, records):
    """12 runs of eps 0.5 against a budget of 2, 4 processes: exactly 4 pass (with records: windows
    that overlap, where the record in the most passing windows is at 2 exactly)."""
    path = tmp_path / "l.db"
    Ledger(path).set_budget(2.0)
    data = [_records(i % 3) if records else DS for i in range(12)]
    with multiprocessing.get_context("fork").Pool(4) as pool:
        ok = pool.starmap(_reserve_one, [(path, d) for d in data])
    assert Ledger(path).spent().epsilon == pytest.approx(2.0) and Ledger(path).spent().releases == 4
    if not records:
        assert sum(ok) == 4 and Ledger(path).spent(DS).releases == 4
    else:  # record 250 is in every window: 4 passed in all; 0..99 and 400.. count their own windows' passes
        assert sum(ok) == 4 and Ledger(path).spent(_records(0)).releases == 4
        assert len(Ledger(path).releases()) == 4


def test_each_records_spending_is_composed_by_the_tightest_accountant(tmp_path):
    """Randomized response at eps = 0.5 on two overlapping windows in turn, budget (100, 1e-6): each
    record's spending is the composition (tightest accountant) of its own releases."""
    led = Ledger(tmp_path / "l.db")
    led.set_budget(100.0, 1e-6)
    mech = make_mechanism("rr", 0.5)
    for i in range(8):
        led.reserve([_records(i % 2)], mech)
    for ids, n in ((np.arange(0, 100), 4), (np.arange(100, 300), 8), (np.arange(300, 400), 4)):
        ref = compose([pure_event(0.5)] * n, 1e-6)
        s = led.spent(ClientData_of(ids))
        assert s.releases == n and (s.epsilon, s.accountant) == (ref.epsilon, ref.accountant)
    assert led.spent(ClientData_of(np.arange(400, 500))).releases == 0


def _reserve_one_rr(led, data, mech):
    try:
        led.reserve([data], mech)
        return True
    except InputError:
        return False


def ClientData_of(ids):
    from secure_auc import ClientData

    return ClientData(np.zeros(len(ids)), np.zeros(len(ids), dtype=np.int8), ids=ids)


def test_report_and_cli_show(tmp_path, capsys):
    path = tmp_path / "l.db"
    led = Ledger(path)
    led.set_budget(4.0)
    led.reserve([DS], make_mechanism("laplace", 1.0), name="ads")
    assert ledger_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "budget per record: eps = 4, delta = 0" in out
    assert "1 dataset(s) without identifiers (ads): eps = 1, delta = 0 (basic) in 1 release(s); basic " \
           "composition eps = 1; left eps = 3" in out
    assert main(["ledger", "show", str(path)]) == 0
    assert "left eps = 3" in capsys.readouterr().out


def test_cli_ledger_charges_each_clients_labels(tmp_path, capsys):
    path = tmp_path / "ledger.db"
    args = ["evaluate", "--protocol", "plain", "--samples", "2000", "--clients", "3", "--epsilon", "1", "--ledger", str(path),
            "--dataset", "d", "--budget", "2.5", "--json"]
    for expected in (1.0, 2.0):
        assert main(args) == 0
        assert json.loads(capsys.readouterr().out)["total_epsilon_spent"] == expected
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "privacy budget would be exceeded for client 0's dataset: spent eps = 2" in err
    assert [(r["evaluation"], r["client"]) for r in Ledger(path).releases()] == [(e, k) for e in (1, 2) for k in range(3)]


# ---- planning --------------------------------------------------------------------------------------
def test_planning_fits_t_evaluations_and_beats_basic_composition():
    p = plan_evaluations(lambda e, d: make_mechanism("distributed", e, delta=d, clients=3), 100, 10.0, 1e-6,
                         total=20_000)
    c = compose([p.mechanism.privacy_event(20_000)] * 100, 1e-6)
    assert c.epsilon <= 10.0 * (1 + 1e-9)
    assert p.per_epsilon > 5 * 0.1  # about sqrt(T) times the basic-composition budget
    # one step more per evaluation would not fit
    more = make_mechanism("distributed", p.per_epsilon * 1.01, delta=1e-8, clients=3)
    assert compose([more.privacy_event(20_000)] * 100, 1e-6).epsilon > 10.0


def test_planning_with_pure_noise_and_no_delta_is_basic_composition():
    p = plan_evaluations(lambda e: make_mechanism("laplace", e), 10, 2.0)
    assert p.per_epsilon == pytest.approx(0.2) and p.composition.accountant == "basic"


def test_cli_plan_and_evaluations(tmp_path, capsys):
    assert main(["ledger", "plan", "--mechanism", "rr", "--evaluations", "100", "--epsilon", "10",
                 "--delta", "1e-6"]) == 0
    out = capsys.readouterr().out
    assert "100 evaluations within eps = 10, delta = 1e-06: each evaluation eps = " in out and "(pld)" in out
    path = tmp_path / "l.db"
    assert main(["evaluate", "--protocol", "plain", "--samples", "2000", "--clients", "2", "--mechanism", "rr", "--evaluations", "100",
                 "--epsilon", "10", "--delta", "1e-6", "--ledger", str(path), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["epsilon"] > 0.1 and "each evaluation eps" in res["plan"]
    assert Ledger(path).budget() == {"epsilon": 10.0, "delta": 1e-6}


@pytest.mark.parametrize("name", ["secure_auc.dp.events", "secure_auc.dp.planning", "secure_auc.dp.discrete", "secure_auc.dp.ddg",
                                  "secure_auc.dp.noise", "secure_auc.dp.skellam_pld",
                                  "secure_auc.dp.pld_compose"])
def test_examples_of_the_accounting_and_noise_modules_run(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# ---- Skellam PLD ---------------------------------------------------------------------------------
def _skellam_pmf_by_convolution(mu, half_width):
    """Sk(mu) pmf on [-w, w] from the Poisson pmf (P(X = x) = sum_k Pois(k + x) Pois(k)), independent of
    the Bessel-function route of secure_auc.dp.skellam_pld; and the mass outside [-w, w]."""
    from scipy.stats import poisson

    k = np.arange(0, int(mu + 40 * math.sqrt(mu) + 2 * half_width + 50))
    f = poisson.pmf(k, mu)
    xs = np.arange(-half_width, half_width + 1)
    pmf = np.array([f[abs(x):] @ f[:len(f) - abs(x)] for x in xs])
    return xs, pmf, max(0.0, 1.0 - math.fsum(pmf))


def _exact_epsilon(xs, pmf, tail, d, delta):
    """Smallest eps with sum_x (p(x) - e^eps p(x - d))_+ + tail <= delta (tail: left-out mass, counted fully)."""
    shifted = np.concatenate([np.zeros(d), pmf[:-d]])  # p(x - d) on the same xs
    def dlt(e):
        return float(np.maximum(pmf - math.exp(e) * shifted, 0.0).sum()) + tail
    lo, hi = 0.0, 50.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if dlt(mid) <= delta else (mid, hi)
    return hi


def test_skellam_logpmf_matches_high_precision_bessel_functions():
    import mpmath

    from secure_auc.dp.skellam_pld import skellam_logpmf

    for mu, x in [(2.5, 0), (2.5, 7), (300.0, 40), (1e3, 400), (1e4, 1000), (4.27e12, 0), (4.27e12, 10**7)]:
        with mpmath.workdps(40):
            ref = float(mpmath.log(mpmath.besseli(x, 2 * mu)) - 2 * mu)
        assert float(skellam_logpmf(x, mu)) == pytest.approx(ref, abs=1e-12, rel=1e-13), (mu, x)


@pytest.mark.parametrize("mu, d", [(10.0, 1), (30.0, 3), (100.0, 5), (10.0, 30)])
@pytest.mark.filterwarnings("ignore:overflow encountered in divide:RuntimeWarning")  # dp-accounting, (10, 30)
def test_skellam_pld_matches_the_brute_force_pld_at_small_mu(mu, d):
    """eps(delta) of Sk(mu) through compose(): at least the exact value from the whole pmf (soundness) and
    within the discretisation (1e-4 per composed release) of it; at T = 10 against dp-accounting's own PLD
    of the two pmfs.  The RDP bound is far looser than both."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from secure_auc.dp.events import skellam_event

    xs, pmf, tail = _skellam_pmf_by_convolution(mu, int(40 * math.sqrt(mu)) + 20 * d)
    delta = 1e-6
    exact = _exact_epsilon(xs, pmf, tail, d, delta)
    c1 = compose([skellam_event(mu, d)], delta)
    assert c1.accountant == "pld" and exact - 1e-9 <= c1.epsilon <= exact + 2e-4
    upper = {int(x): math.log(p) for x, p in zip(xs, pmf) if p > 0}
    lower = {int(x) + d: v for x, v in upper.items()}
    ref = pld_lib.from_two_probability_mass_functions(lower, upper).self_compose(10)
    ref_eps = ref.get_epsilon_for_delta(delta - 10 * tail)
    c10 = compose([skellam_event(mu, d)] * 10, delta)
    assert c10.epsilon == pytest.approx(ref_eps, abs=10 * 1e-4)


def test_a_large_pessimistic_pld_is_the_dense_pmf_dp_accounting_makes_of_its_dict(monkeypatch):
    """Beyond dp-accounting's sparse limit (1,000 losses) the PLD is built as the dense pmf directly:
    the same lowest loss, probabilities and +infinity mass as dp-accounting's own dict route gives."""
    from dp_accounting.pld import pld_pmf

    from secure_auc.dp.skellam_pld import pessimistic_pld

    rng = np.random.default_rng(0)
    losses = np.sort(rng.uniform(-0.4, 0.4, 6000))[::-1]
    mass = rng.random(6000)
    mass *= 0.99 / mass.sum()
    direct = pessimistic_pld(losses, mass, -0.5, 0.0099, 1e-3, 1e-4)._pmf_remove
    monkeypatch.setattr(pld_pmf, "_MAX_PMF_SPARSE_SIZE", math.inf)  # now the dict, kept sparse
    via_dict = pessimistic_pld(losses, mass, -0.5, 0.0099, 1e-3, 1e-4)._pmf_remove
    assert isinstance(direct, pld_pmf.DensePLDPmf) and isinstance(via_dict, pld_pmf.SparsePLDPmf)
    assert direct.size > 5000
    dense = via_dict.to_dense_pmf()
    assert (direct._lower_loss, direct._infinity_mass) == (dense._lower_loss, dense._infinity_mass)
    assert np.array_equal(direct._probs, dense._probs)


@pytest.mark.parametrize("t", [1, 2, 100])
def test_the_fast_self_composition_is_dp_accountings(t):
    """pld_compose.self_compose makes the PLD that dp-accounting's own self_compose makes, bit for
    bit: dense and sparse pmfs, symmetric PLDs and one whose add and remove pmfs differ."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from secure_auc.dp.ddg import dgauss_pld
    from secure_auc.dp.pld_compose import self_compose
    from secure_auc.dp.skellam_pld import skellam_pld

    plds = [skellam_pld(4.27e12, 458_406), skellam_pld(30.0, 3), dgauss_pld(1e6, 458_406),
            pld_lib.from_discrete_laplace_mechanism(0.3), pld_lib.from_discrete_laplace_mechanism(8.0),
            pld_lib.from_gaussian_mechanism(2.0, sampling_prob=0.3, value_discretization_interval=1e-3)]
    assert any(isinstance(p._pmf_remove, pld_pmf.SparsePLDPmf) for p in plds) and not plds[-1]._symmetric

    def state(pmf):
        if isinstance(pmf, pld_pmf.SparsePLDPmf):
            return "sparse", pmf._loss_probs, pmf._infinity_mass
        return "dense", pmf._lower_loss, pmf._probs.tolist(), pmf._infinity_mass

    for pld in plds:
        ours, theirs = self_compose(pld, t), pld.self_compose(t)
        assert ours._symmetric == theirs._symmetric
        for a, b in ((ours._pmf_remove, theirs._pmf_remove), (ours._pmf_add, theirs._pmf_add)):
            assert state(a) == state(b)


def test_skellam_pld_with_a_sensitivity_far_beyond_the_noise_is_not_private():
    """Delta = 1000 against Sk(10): p(x - Delta) underflows on the whole support, every loss is +infinity."""
    from secure_auc.dp.skellam_pld import skellam_pld

    assert skellam_pld(10.0, 1000).get_epsilon_for_delta(0.5) == math.inf


@pytest.mark.parametrize("t", [1, 100])
def test_skellam_pld_is_close_to_the_gaussian_pld_at_large_mu(t):
    """Sk(mu) on D at the T = 100 plan's scale (mu ~ 4.3e12, Delta = M - 1) against N(0, 2 mu).

    For large mu the Skellam's privacy loss is the Gaussian's up to O(1 / mu) terms, and its excess kurtosis
    1 / (2 mu) > 0 makes the tails of its loss, if anything, heavier: its eps cannot be below the Gaussian's
    by more than the discretisation (both PLDs are pessimistic, the Gaussian's with connect-the-dots, the
    tighter of the two constructions, so ours is at most ~T h above).  A Skellam eps below the Gaussian's
    would mean losses under-counted."""
    from secure_auc.dp.events import skellam_event

    mu, d = 4.27e12, 458_406
    sk = compose([skellam_event(mu, d)] * t, 1e-6)
    ga = compose([gaussian_event(math.sqrt(2 * mu) / d)] * t, 1e-6)
    assert sk.accountant == "pld"
    assert ga.epsilon - 1e-6 <= sk.epsilon <= ga.epsilon + t * 1e-4


def test_skellam_quadrature_agrees_with_the_term_by_term_sum():
    """The large-mu route (quadrature over blocks) against the exact sum over the support, where both run."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from secure_auc.dp.skellam_pld import skellam_pld

    mu, d = 5e6, 2000
    summed, integrated = skellam_pld(mu, d), skellam_pld(mu, d, enumerate_max=0)
    gauss = pld_lib.from_gaussian_mechanism(math.sqrt(2 * mu) / d)
    eps = np.linspace(0.0, 20.0, 201)
    da, db = summed.get_delta_for_epsilon(eps), integrated.get_delta_for_epsilon(eps)
    assert np.all(da > 0) and np.allclose(db, da, rtol=1e-9, atol=1e-15)
    for t in (1, 100):
        a, b = summed.self_compose(t), integrated.self_compose(t)
        for delta in (1e-3, 1e-6):
            assert b.get_epsilon_for_delta(delta) == pytest.approx(a.get_epsilon_for_delta(delta), rel=1e-8)
        ga = gauss.self_compose(t).get_epsilon_for_delta(1e-6)
        assert ga - 1e-6 <= b.get_epsilon_for_delta(1e-6) <= ga + t * 1e-4


def test_skellam_composition_grows_with_t_and_beats_rdp():
    from secure_auc.dp.events import composed_event, skellam_event

    ev = composed_event([skellam_event(4.27e12, 458_406), skellam_event(81.35, 1)])
    eps = []
    for t in (1, 2, 5, 10, 50, 100, 300):
        c = compose([ev] * t, 1e-6)
        assert c.accountant == "pld" and c.pld < c.rdp
        eps.append(c.epsilon)
    assert all(a < b for a, b in zip(eps, eps[1:]))
    assert eps[-1] < 300 * eps[0]  # sublinear: about sqrt(T)


def test_planning_100_skellam_evaluations_within_10_and_1e6_has_std_below_4e5():
    """Distributed Skellam on the built-in data, K = 10: the std of each of 100 evaluations within
    (10, 1e-6), from the mechanism's delta-method std (as scripts/accounting_table.py)."""
    from secure_auc.data import make_ctr_dataset, partition_owner
    from secure_auc.local_stats import LocalStatistics
    from secure_auc.metrics import midranks, rank_auc

    scores, labels = make_ctr_dataset()
    m, k = len(labels), 10
    stats = LocalStatistics.from_owner(midranks(scores), labels, partition_owner(scores, k, "iid", seed=0), k)
    p = plan_evaluations(lambda e, d: make_mechanism("distributed", e, delta=d, clients=k, noise="skellam"),
                         100, 10.0, 1e-6, total=m)
    assert p.composition.accountant == "pld" and p.composition.epsilon <= 10.0
    assert compose([p.mechanism.privacy_event(m)] * 100, 1e-6).epsilon <= 10.0 * (1 + 1e-9)
    assert p.mechanism.delta_method_std(stats, m, rank_auc(labels, scores)) <= 4e-5


# ---- the distributed discrete Gaussian --------------------------------------------------------------
def _sum_of_dgauss_pmf(s2, h):
    """Exact pmf of the sum of h iid N_Z(0, s2), by convolution of the (truncated) pmf."""
    r = int(40 * math.sqrt(s2)) + 40
    k = np.arange(-r, r + 1)
    one = np.exp(-k * k / (2.0 * s2))
    one /= one.sum()
    out = one
    for _ in range(h - 1):
        out = np.convolve(out, one)
    return np.arange(-(len(out) // 2), len(out) // 2 + 1), out


@pytest.mark.parametrize("s2, h", [(0.3, 2), (0.5, 3), (1.0, 5)])
def test_ddg_pointwise_bound_holds_against_the_exact_sum(s2, h):
    """|log P[S = z] / P[N_Z(0, h s^2) = z]| <= L for the exact pmf of the sum S (where it is not tiny)."""
    from secure_auc.dp.ddg import ddg_max_divergence, ddg_tau

    z, p = _sum_of_dgauss_pmf(s2, h)
    q = np.exp(-z * z / (2.0 * h * s2))
    q /= q.sum()
    ok = (p > 1e-250) & (q > 1e-250)
    worst = np.abs(np.log(p[ok]) - np.log(q[ok])).max()
    bound = ddg_max_divergence(s2, h)
    assert worst <= bound and worst > bound / 500  # valid, and not vacuous
    assert bound <= ddg_tau(s2, h)  # below the paper's tau


def test_ddg_rdp_is_the_papers_proposition_14_at_a_hand_checked_point():
    """s^2 = 1, h = 3, Delta = 2: tau = 10 (exp(-pi^2) + exp(-4 pi^2 / 3)) = 5.36e-4, RDP
    min(alpha 2 / 3 + tau, alpha / 2 (2 / sqrt 3 + tau)^2), converted like dp-accounting."""
    from secure_auc.dp.ddg import ddg_tau
    from secure_auc.dp.distributed import rdp_to_dp
    from secure_auc.dp.events import _RDP_ORDERS, ddg_event

    tau = 10 * (math.exp(-math.pi**2) + math.exp(-4 * math.pi**2 / 3))
    assert ddg_tau(1.0, 3) == pytest.approx(tau, rel=1e-12) and tau == pytest.approx(5.36e-4, rel=1e-3)
    a = _RDP_ORDERS
    rdp = np.minimum(a * 4 / 6 + tau, a / 2 * (2 / math.sqrt(3) + tau) ** 2)
    c = compose([ddg_event(1.0, 3, 2)], 1e-5)
    assert c.rdp == pytest.approx(rdp_to_dp(rdp, a, 1e-5), rel=1e-4)
    assert c.rdp > compose([zcdp_event(4 / 6)], 1e-5).rdp  # tau costs something here


@pytest.mark.parametrize("sigma, d", [(3.0, 1), (40.0, 3), (40.0, 100)])
def test_discrete_gaussian_pld_matches_dp_accountings_at_small_sigma(sigma, d):
    from dp_accounting.pld import privacy_loss_distribution as pld

    from secure_auc.dp.ddg import dgauss_pld

    ref = pld.from_discrete_gaussian_mechanism(sigma, sensitivity=d)
    for delta in (1e-3, 1e-6, 1e-9):
        ours = dgauss_pld(sigma, d).get_epsilon_for_delta(delta)
        assert ours >= ref.get_epsilon_for_delta(delta) - 2e-4 and ours == pytest.approx(ref.get_epsilon_for_delta(delta), abs=5e-4)


@pytest.mark.parametrize("t", [1, 30])
def test_ddg_event_is_the_gaussian_at_many_grid_steps(t):
    """s = 1e6 grid steps, h = 100, Delta = 1e7: the Gaussian with noise multiplier 1 (PLD, T-fold)."""
    from secure_auc.dp.events import ddg_event

    c = compose([ddg_event(1e12, 100, 10**7)] * t, 1e-6)
    g = compose([gaussian_event(1.0)] * t, 1e-6)
    assert c.accountant == "pld" and c.epsilon == pytest.approx(g.epsilon, abs=2e-3 * t**0.5)


def test_ddg_sum_costs_more_than_one_discrete_gaussian_at_small_s():
    """At s < 1 the sum of h shares is not N_Z(0, h s^2): both accountants charge the difference (tau, L)."""
    from secure_auc.dp.events import ddg_event

    shares, single = compose([ddg_event(0.5, 4, 1)], 1e-6), compose([ddg_event(2.0, 1, 1)], 1e-6)
    assert shares.epsilon > single.epsilon + 0.02
    assert shares.rdp > single.rdp + 0.05 and shares.pld > single.pld + 0.02
    big = compose([ddg_event(64.0, 4, 8)], 1e-6), compose([ddg_event(256.0, 1, 8)], 1e-6)
    assert big[0].epsilon == big[1].epsilon  # s = 8: no difference left in floating point


def test_ddg_event_is_checked():
    from secure_auc.dp.events import check_event, ddg_event

    with pytest.raises(ValueError, match="at least 1/4"):
        check_event(ddg_event(0.2, 3, 1))
    with pytest.raises(ValueError, match="shares of a ddg event"):
        check_event({"kind": "ddg", "variance": 4.0, "shares": 0, "sensitivity": 1})


def test_planning_100_gaussian_evaluations_within_10_and_1e6_has_std_below_4e5():
    """Distributed discrete Gaussian on the built-in data, K = 10, as the Skellam test above."""
    from secure_auc.data import make_ctr_dataset, partition_owner
    from secure_auc.local_stats import LocalStatistics
    from secure_auc.metrics import midranks, rank_auc

    scores, labels = make_ctr_dataset()
    m, k = len(labels), 10
    stats = LocalStatistics.from_owner(midranks(scores), labels, partition_owner(scores, k, "iid", seed=0), k)
    p = plan_evaluations(lambda e, d: make_mechanism("distributed", e, delta=d, clients=k, noise="gaussian"),
                         100, 10.0, 1e-6, total=m)
    assert [e["kind"] for e in p.mechanism.privacy_event(m)["events"]] == ["ddg", "ddg"]
    assert p.composition.accountant == "pld" and p.composition.epsilon <= 10.0
    assert compose([p.mechanism.privacy_event(m)] * 100, 1e-6).epsilon <= 10.0 * (1 + 1e-9)
    assert p.mechanism.delta_method_std(stats, m, rank_auc(labels, scores)) <= 4e-5
