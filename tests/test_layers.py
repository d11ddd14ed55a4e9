"""The package's import structure: layers in one direction, no import cycle, and only
the CLI parses arguments or prints.

Every ``import`` and ``from ... import`` in every module of ``secure_auc`` is read
with ``ast`` (those inside functions too), relative imports resolved, and each
arrow checked against the layers, top to bottom:

    cli  ->  evaluate, experiments  ->  protocol, mpc, simulation, deploy  ->  dp, data  ->  metrics, validation, local_stats
"""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "secure_auc"

LAYERS = [
    ("cli", "__main__"),
    ("evaluate", "experiments", "training", "selection"),
    ("protocol", "mpc", "simulation", "deploy", "result", "report"),
    ("dp", "data"),
    ("metrics", "validation", "local_stats"),
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
