"""The package's layers (docs/ARCHITECTURE.md "Modules"): a module imports only from its own layer or below.

Every import statement of every module under ``relcp_mpi/`` (function-level and relative imports included) is
read with ``ast`` and the imported unit (top-level subpackage or module of ``relcp_mpi``) is placed on the layer
list below; an import of a higher layer fails the test, and so does a unit that is on no layer (a new subpackage
must be placed).  The package face ``relcp_mpi/__init__.py`` is the one exception: it hands ``Simulation`` out
lazily (``relcp_mpi.Simulation``) and imports nothing else.
"""
import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "relcp_mpi")

# bottom to top; units on one layer may import each other (no cycles: docs/ARCHITECTURE.md)
LAYERS = (
    ("basics", "petsc"),
    ("bodies",),
    ("geometry", "parallel"),
    ("contact", "state"),
    ("solver",),
    ("config", "stepper"),
    ("physics", "io"),
    ("driver", "events"),
    ("simulation",),
    ("cli",),
    ("__main__",),
)
LAYER = {unit: k for k, units in enumerate(LAYERS) for unit in units}


def _module_name(path):
    """Dotted module name of a file under the package (``relcp_mpi.parallel.ghosts``, ``relcp_mpi`` for the face)."""
    rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _unit(dotted):
    """The unit of a dotted name inside the package: ``relcp_mpi.parallel.ghosts`` -> ``parallel``."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else None


def imported_units(source, module, is_package=False):
    """(unit, line) of every ``relcp_mpi`` import in ``source`` (the text of module ``module``; relative imports
    resolved against it)."""
    out = []
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - (node.level - 1)]
                target = ".".join(anchor + ([node.module] if node.module else []))
                names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            elif node.module:
                names = [node.module]
        for name in names:
            if name == "relcp_mpi" or name.startswith("relcp_mpi."):
                unit = _unit(name)
                if unit is not None:
                    out.append((unit, node.lineno))
    return out


def _sources():
    for dirpath, _, files in os.walk(PACKAGE):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    yield path, _module_name(path), f == "__init__.py", fh.read()


def upward_imports(source, module, is_package=False):
    """The imports of ``source`` (module ``module``) that reach a higher layer: [(imported unit, line)]."""
    own = LAYER[_unit(module)]
    return [(u, line) for u, line in imported_units(source, module, is_package) if LAYER.get(u, -1) > own]


def test_every_unit_has_a_layer():
    units = {_unit(m) for _, m, _, _ in _sources()} - {None}
    assert units - set(LAYER) == set()


def test_no_module_imports_a_layer_above_it():
    found = []
    for path, module, is_package, source in _sources():
        if module == "relcp_mpi":          # the package face: its lazy Simulation
            continue
        found += [f"{module}:{line} imports relcp_mpi.{u}" for u, line in upward_imports(source, module, is_package)]
    assert found == []


@pytest.mark.parametrize("source, module, expected", [
    ("from relcp_mpi.config.deck import DeckError\n", "relcp_mpi.bodies.builder", ["config"]),   # the old builder
    ("def f():\n    from relcp_mpi.driver import engine\n", "relcp_mpi.solver.apgd", ["driver"]),
    ("from ..stepper import relcp\n", "relcp_mpi.parallel.ghosts", ["stepper"]),
    ("from ..bodies.store import BodyStore\nfrom .errors import agree\n", "relcp_mpi.parallel.ghosts", []),
    ("import numpy as np\nfrom relcp_mpi.basics import quaternion\n", "relcp_mpi.geometry.torus", []),
])
def test_the_check_sees_upward_imports(source, module, expected):
    """The scan itself: function-level, relative and absolute imports of a higher layer are found (the body
    builder's former import of the deck layer among them), imports of the same or lower layers are not."""
    assert [u for u, _ in upward_imports(source, module)] == expected
