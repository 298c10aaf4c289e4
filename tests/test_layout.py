"""The rooms of the house, read from the source with `ast`: no import cycle
between modules, and no arrow that climbs from a lower room into a higher
one (shared/design.md's layout: cli -> bench -> training/inference ->
models/data/losses/metrics -> configs -> files)."""

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANK = {
    "files": 0,
    "configs": 1,
    "metrics": 2,
    "models": 2,
    "data": 2,
    "losses": 2,
    "training": 3,
    "inference": 3,
    "bench": 4,
    "cli": 5,
}


def module_names() -> dict[str, Path]:
    """srgan's modules (`srgan.data.paired`, `srgan.data` for its
    __init__), each with its file, read from the folders pyproject maps."""
    modules = {}
    for room in RANK:
        for path in (ROOT / room).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(("srgan", *parts))
            modules[name.removesuffix(".__init__")] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Every srgan module each module imports, wherever the import stands
    (top, function, TYPE_CHECKING block): a lazy import is still an arrow.
    Importing `srgan.a.b` runs `srgan.a` first, so that is an arrow too."""
    modules = module_names()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target not in modules:
                    continue
                parts = target.split(".")
                for end in range(2, len(parts) + 1):
                    parent = ".".join(parts[:end])
                    if parent != name and not name.startswith(parent + "."):
                        graph[name].add(parent)
    return graph


def room(module: str) -> str:
    return module.split(".")[1]


def test_the_rooms_listed_are_the_packages_pyproject_installs():
    text = (ROOT / "pyproject.toml").read_text()
    installed = {line.split('"')[1].removeprefix("srgan.") for line in text.splitlines() if line.startswith('"srgan.')}
    assert installed == set(RANK)


def test_no_import_climbs_from_a_lower_room_into_a_higher_one():
    climbs = sorted(
        f"{a} -> {b}" for a, targets in import_graph().items() for b in targets if RANK[room(b)] > RANK[room(a)]
    )
    assert climbs == []


def test_no_two_rooms_import_each_other():
    rooms: dict[str, set[str]] = defaultdict(set)
    for a, targets in import_graph().items():
        rooms[room(a)].update(room(b) for b in targets if room(b) != room(a))
    both_ways = sorted(f"{a} <-> {b}" for a in rooms for b in rooms[a] if a < b and a in rooms[b])
    assert both_ways == []


def test_no_module_import_cycle():
    graph = import_graph()
    cycles = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append(" -> ".join(path[path.index(module) :] + [module]))
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(module_names()):
        visit(module, [])
    assert cycles == []


def test_the_help_imports_no_torch():
    """`srgan --help` stays fast because the app imports torch only in the
    commands that run a network: a top-level torch import in a module the
    app reaches breaks this."""
    code = "import sys, srgan.cli.app; print(sorted(m for m in ('torch', 'av', 'onnx', 'lpips') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
