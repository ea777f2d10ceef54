"""The ahead-of-time build of the compiled kernels (geometry/aot_build.py, geometry/numba_switch.py).

* a rod run takes the AOT module's kernels without importing numba or llvmlite (the point of the AOT build:
  ~90 MiB less resident memory per rank); skipped without an AOT build (``bash tools/setup.sh`` makes one);
* a stale build (built from other kernel sources) is not used.

That the AOT kernels give the numpy kernels' bits is checked by tests/test_kernels_rod_jit.py and
tests/test_kernels_fast.py (``compiled_backend`` fixture).
"""
import json
import os
import subprocess
import sys

import pytest

from relcp_mpi.geometry import numba_switch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# one step of the 2,000-rod dense bed: pair geometry, end-point rows and screen see more than MIN_ROWS rows, the
# candidates come from the compiled cell list; the kernels' entry points count their calls
_RUN = r"""
import json, sys
from relcp_mpi.geometry import numba_switch, spherocylinder_jit as J
from relcp_mpi.contact import neighbors_jit as N
calls = {}
def counted(mod, name):
    real = getattr(mod, name)
    def f(*a, **k):
        calls[name] = calls.get(name, 0) + 1
        return real(*a, **k)
    setattr(mod, name, f)
for mod, name in ((J, "capsule_pairs_indexed"), (J, "end_rows"), (J, "round_lower_bound"), (N, "cell_pairs")):
    counted(mod, name)
from mpi4py import MPI
from relcp_mpi import Simulation
from relcp_mpi.config.deck import load
deck, _ = load("input_decks/peer/n2000c.yaml")
sim = Simulation.from_deck(deck, comm=MPI.COMM_WORLD)
sim.run(1, writers=[])
print(json.dumps({"backend": numba_switch.backend(), "calls": calls,
                  "numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules,
                  "scipy.spatial": "scipy.spatial" in sys.modules}))
"""


@pytest.mark.skipif(not numba_switch.HAVE_AOT_FILE or numba_switch.aot_module() is None,
                    reason="no (current) AOT build of the kernels (bash tools/setup.sh builds it)")
def test_rod_run_uses_aot_kernels_without_numba():
    env = {k: v for k, v in os.environ.items() if k not in ("RELCP_NUMBA", "RELCP_AOT")}
    env.setdefault("PETSC_DIR", "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real")
    res = subprocess.run([sys.executable, "-c", _RUN], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["backend"] == "aot"
    assert set(out["calls"]) == {"capsule_pairs_indexed", "end_rows", "round_lower_bound", "cell_pairs"}, out
    assert not out["numba"] and not out["llvmlite"], out
    assert not out["scipy.spatial"], out            # the compiled cell list replaces the KD-tree


def test_stale_aot_build_is_not_used(monkeypatch):
    """An AOT module whose source fingerprint differs from the kernel sources is ignored (with a warning): the JIT
    (or numpy) path runs instead of other bits."""
    class Stale:
        @staticmethod
        def fingerprint():
            return numba_switch.source_fingerprint() ^ 1

    monkeypatch.setattr(numba_switch, "HAVE_AOT_FILE", True)
    monkeypatch.setattr(numba_switch, "_AOT", None)
    monkeypatch.setattr(numba_switch, "_load_aot", lambda: Stale)
    monkeypatch.setenv("RELCP_NUMBA", "1")
    monkeypatch.delenv("RELCP_AOT", raising=False)
    with pytest.warns(RuntimeWarning, match="other kernel sources"):
        assert numba_switch.aot_module() is None
    assert numba_switch.backend() == ("jit" if numba_switch.HAVE_NUMBA else "numpy")
    monkeypatch.setattr(numba_switch, "_AOT", Stale)                 # a current build is taken first ...
    assert numba_switch.backend() == "aot"
    monkeypatch.setenv("RELCP_AOT", "0")                              # ... unless RELCP_AOT=0
    assert numba_switch.backend() == ("jit" if numba_switch.HAVE_NUMBA else "numpy")
    monkeypatch.setenv("RELCP_NUMBA", "0")                            # RELCP_NUMBA=0: numpy, whatever is built
    assert numba_switch.backend() == "numpy"
