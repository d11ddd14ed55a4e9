"""The package's import structure: layers in one direction, no import cycle, and only
the CLI parses arguments or prints.

Every ``import`` and ``from ... import`` in every module of ``secure_auc`` is read
with ``ast`` (those inside functions too), relative imports resolved, and each
arrow checked against the layers, top to bottom:

    cli  ->  evaluate, experiments  ->  protocol, mpc, simulation, deploy  ->  dp, data  ->  metrics, validation, local_stats

and each mechanism family's name is spelled in its own module (its declaration) and the registry only.
"""

import ast
import functools
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "secure_auc"

LAYERS = [
    ("cli", "__main__"),
    ("evaluate", "experiments", "training", "selection", "session", "request"),
    ("protocol", "mpc", "simulation", "deploy", "result", "interval_kernels", "report"),
    ("dp", "data"),
    ("metrics", "validation", "local_stats", "interrupts", "compile_cache"),
]


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t.startswith("secure_auc") and t != name:
                out.add(t)
    return out


def _graph():
    mods = _modules()
    known = set(mods)
    return {m: _imports(m, p, known) for m, p in mods.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package's face (secure_auc/__init__.py) may import any layer
    for i, names in enumerate(LAYERS):
        if parts[1] in names:
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def test_every_module_is_in_a_layer_and_imports_only_its_own_layer_or_below():
    wrong = []
    for mod, targets in _graph().items():
        here = _layer(mod)
        if here is None:
            continue
        for t in targets:
            there = _layer(t)
            if there is not None and there < here:
                wrong.append(f"{mod} -> {t}")
    assert wrong == []


def test_no_import_cycle():
    graph = _graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize("call", ["print(", "argparse", "sys.argv"])
def test_only_the_cli_parses_arguments_or_prints(call):
    offenders = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                 if not p.relative_to(PKG).parts[0] in ("cli", "__main__.py") and call in p.read_text()]
    assert offenders == []


def test_no_module_imports_another_modules_private_names():
    offenders = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("secure_auc", "")) and node.level:
                offenders += [f"{path.relative_to(PKG)}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []


# the same spelling for another concept: (module, literal) -> what it is there
HOMONYMS = {
    ("dp/events.py", "none"): "the kind of a non-private privacy event, stored in ledgers",
    ("dp/events.py", "gaussian"): "the kind of a Gaussian privacy event, stored in ledgers",
    ("dp/distributed.py", "gaussian"): "the distributed family's discrete Gaussian shares (its noise= value)",
    ("dp/distributed.py", "laplace"): "the distributed family's discrete Laplace shares (its noise= value)",
    ("experiments/paper_tables.py", "rr"): "the paper's published tables, keyed by the paper's method names",
}


def _literals(path: Path) -> set[str]:
    """The string constants of a module, its docstrings and ``__all__`` left out."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip |= {id(n) for n in ast.walk(node.value)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip}


def test_each_mechanism_family_is_named_in_its_own_module_and_the_registry_only():
    import sys

    from secure_auc.dp.registry import families

    declared = {}
    for fam in families():
        homes = [m.__file__ for name, m in list(sys.modules.items())
                 if name.startswith("secure_auc.") and getattr(m, "FAMILY", None) is fam]
        assert len(homes) == 1, (fam.name, homes)
        declared[fam.name] = str(Path(homes[0]).relative_to(PKG))
    assert len(declared) >= 5
    found = {name: set() for name in declared}
    for path in PKG.rglob("*.py"):
        for name in _literals(path) & set(declared):
            found[name].add(str(path.relative_to(PKG)))
    wrong = {name: sorted(where - {declared[name], "dp/registry.py"} - {m for m, n in HOMONYMS if n == name})
             for name, where in found.items()}
    assert {name: w for name, w in wrong.items() if w} == {}
    assert all(declared[name] in found[name] for name in declared)  # the declaration spells it
    assert all(name in found and module in found[name] for module, name in HOMONYMS)  # no stale exception


def test_a_sort_is_named_in_one_module_and_implements_the_interface():
    """A sort is chosen by name in one place (``mpc/sort/registry.py``): no other module spells a
    sort's name (a comparison, a default, a list of choices), and every registered sort implements
    the rank step's interface (its sorter with sort and unsort, the mid-ranks over it, its rounds)."""
    from secure_auc.mpc.sort.registry import SORTS, RankSort

    where: dict = {}
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in SORTS:
                where.setdefault(str(path.relative_to(PKG)), set()).add(node.value)
    assert where == {"mpc/sort/registry.py": set(SORTS)}
    for name, sort in SORTS.items():
        assert sort.name == name and sort.opens and isinstance(sort, RankSort)
        missing = [m for m in ("sorter", "midranks", "from_sources", "seconds")
                   if getattr(type(sort), m) is getattr(RankSort, m)]
        assert missing == [], f"{name} does not implement {missing}"


def _room(module: str, level: int) -> str:
    """A module's room as a reader sees the tree: at level 2 ``secure_auc.X`` (a top-level module or a
    whole folder), at level 3 inside ``secure_auc.mpc`` its modules and folders (``comm``, ``roles``...)."""
    return ".".join(module.split(".")[:level])


def _cycles(graph: dict) -> list:
    cycles, seen = [], set()
    for start in graph:
        stack, path = [(start, iter(graph.get(start, ())))], [start]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                continue
            if nxt == start:
                cycles.append(tuple(path))
            elif nxt not in path and nxt not in seen:
                stack.append((nxt, iter(graph.get(nxt, ()))))
                path.append(nxt)
        seen.add(start)
    return cycles


@pytest.mark.parametrize("level, inside", [(2, "secure_auc."), (3, "secure_auc.mpc.")])
def test_no_import_runs_back_up_between_folders(level, inside):
    """Folders import one way only: no folder imports a module of a folder that imports it, among
    the package's top-level modules and folders, and among ``secure_auc.mpc``'s (the faces,
    ``secure_auc/__init__.py`` and ``secure_auc/mpc/__init__.py``, aside)."""
    faces = ("secure_auc", "secure_auc.mpc")
    rooms: dict = {}
    for mod, targets in _graph().items():
        if mod in faces or not mod.startswith(inside):
            continue
        for t in targets:
            a, b = _room(mod, level), _room(t, level)
            if a != b and t not in faces and t.startswith(inside):
                rooms.setdefault(a, set()).add(b)
    assert _cycles(rooms) == []


@functools.lru_cache(maxsize=1)
def _called_names() -> dict:
    """Every module's called names (``f(...)`` and ``x.f(...)``), each module parsed once."""
    out = {}
    for mod, path in _modules().items():
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None)
        out[mod] = names
    return out


def _calls(name: str, within=("secure_auc",)) -> set:
    """The modules (under ``within``) whose code calls ``name`` (a plain or an attribute call)."""
    return {mod for mod, names in _called_names().items() if mod.startswith(within) and name in names}


def test_each_role_is_written_once():
    """CrypTen is initialised and the dealer's branch taken in one module, the parties are spawned
    in one, and the evaluation's last steps (the clients' statistics and noise, the report
    vectors, the server's estimate) are computed in one, whatever the layout or the path."""
    assert _calls("init_party") == {"secure_auc.mpc.roles.world"}
    assert _calls("run_dealer") == {"secure_auc.mpc.roles.world"}
    assert _calls("spawn_parties") == {"secure_auc.mpc.launch"}
    mpc_and_services = ("secure_auc.mpc", "secure_auc.deploy", "secure_auc.cli")
    steps = {step: _calls(step, mpc_and_services) for step in ("ClientGroup", "Client", "Server", "host_report")}
    assert set().union(*steps.values()) == {"secure_auc.mpc.finish"}, steps
