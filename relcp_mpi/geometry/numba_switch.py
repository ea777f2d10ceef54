"""The switch of the optional compiled kernels: whether they are used, and which build of them.

The compiled twins (``ellipsoid_jit``, ``spherocylinder_jit``, ``contact.neighbors_jit``, ``solver.operator_jit``,
``solver.vector_jit``)
replace numpy (or PETSc) kernels for large batches; every build gives the same bits as the path it replaces.
Three backends, tried in this order:

* ``aot``: the extension module ``relcp_mpi.geometry._kernels_aot``, compiled ahead of time from the same Python
  functions by :mod:`relcp_mpi.geometry.aot_build` (``tools/setup.sh``; ``pip install .`` when numba is
  importable at build time).  It needs neither numba nor LLVM at run time (importing numba costs ~90 MiB RSS per
  rank).  Used only when its source fingerprint matches the kernel sources next to it (a stale build after an
  edit of a kernel is ignored, with a warning, instead of giving other bits);
* ``jit``: numba (Debian ``python3-numba``; ``pip install numba`` on a cluster), imported and compiling only
  when a kernel is first used;
* ``numpy``: the numpy kernels (no compiled backend, or switched off).

Environment: ``RELCP_NUMBA=0`` forces numpy (no compiled kernel at all); ``RELCP_AOT=0`` skips the AOT module
(numba JIT, if installed, else numpy).  Both are read at every dispatch, so tests can switch them.
"""
import hashlib
import importlib
import importlib.util
import os
import warnings

AOT_MODULE = "relcp_mpi.geometry._kernels_aot"
_HERE = os.path.dirname(os.path.abspath(__file__))
# the files the AOT module is built from: any edit of them makes an existing build stale
AOT_SOURCES = (os.path.join(_HERE, "ellipsoid_jit.py"), os.path.join(_HERE, "spherocylinder_jit.py"),
               os.path.join(_HERE, os.pardir, "contact", "neighbors_jit.py"),
               os.path.join(_HERE, os.pardir, "solver", "operator_jit.py"),
               os.path.join(_HERE, os.pardir, "solver", "vector_jit.py"), os.path.join(_HERE, "aot_build.py"))

HAVE_NUMBA = importlib.util.find_spec("numba") is not None
HAVE_AOT_FILE = importlib.util.find_spec(AOT_MODULE) is not None
AVAILABLE = os.environ.get("RELCP_NUMBA", "1") != "0" and (HAVE_NUMBA or HAVE_AOT_FILE)
_AOT = None                     # the loaded AOT module, False when absent or stale, None before the first look


def source_fingerprint():
    """63-bit integer hash of the AOT module's source files (:data:`AOT_SOURCES`), as baked into a build."""
    h = hashlib.sha256()
    for path in AOT_SOURCES:
        with open(path, "rb") as f:
            h.update(f.read())
    return int.from_bytes(h.digest()[:7], "little")


def _load_aot():
    return importlib.import_module(AOT_MODULE)


def aot_module():
    """The AOT extension module, or None when it is not built, fails to import or is stale (loaded once)."""
    global _AOT
    if _AOT is None:
        _AOT = False
        if HAVE_AOT_FILE:
            try:
                mod = _load_aot()
            except ImportError as exc:
                warnings.warn(f"{AOT_MODULE} does not import ({exc}); not using it", RuntimeWarning)
            else:
                if mod.fingerprint() == source_fingerprint():
                    _AOT = mod
                else:
                    warnings.warn(f"{AOT_MODULE} was built from other kernel sources; not using it (rebuild: "
                                  "bash tools/setup.sh)", RuntimeWarning)
    return _AOT or None


def backend():
    """The backend a kernel call takes now: ``"aot"``, ``"jit"`` or ``"numpy"`` (module docstring)."""
    if os.environ.get("RELCP_NUMBA", "1") == "0":
        return "numpy"
    if os.environ.get("RELCP_AOT", "1") != "0" and HAVE_AOT_FILE and aot_module() is not None:
        return "aot"
    return "jit" if HAVE_NUMBA else "numpy"


def enabled():
    """True when the compiled kernels are used (an AOT build or numba, and ``RELCP_NUMBA`` is not ``0``)."""
    return AVAILABLE and backend() != "numpy"


def use_compiled(rows, min_rows):
    """Whether a batch of ``rows`` rows takes a compiled kernel: with the AOT build any non-empty batch (nothing
    to import, and the numpy twins pay dozens of array passes per call: small batches, e.g. the hard pairs of an
    ellipsoid kernel's extra starts, cost most there), with numba's JIT batches of at least ``min_rows`` (the
    first use imports numba, ~1 s per process).  The compiled kernels give the numpy kernels' bits either way."""
    if not AVAILABLE or rows < 1:
        return False
    kind = backend()
    return kind == "aot" or (kind == "jit" and rows >= min_rows)


def aot_name(module, entry):
    """The name under which the function ``entry`` of the kernel module ``module`` (its last dotted part) is
    exported by the AOT module."""
    return f"{module.rsplit('.', 1)[-1]}__{entry.lstrip('_')}"


def compile_globals(g, names):
    """Replace the functions ``names`` of the module namespace ``g`` by their numba versions, in order (numba
    resolves the calls between them through the module globals, so callees come first).

    No ``fastmath`` (no reassociation, no fused multiply-add: the same IEEE operations as numpy) and the numpy
    error model (x / 0 gives inf/nan as in numpy).  Compiled code is cached on disk where numba finds a
    writable cache directory (next to the module or in the user's cache); without one (a read-only install
    and no writable home) the kernels are compiled in memory instead, once per process."""
    import numba
    for name in names:
        try:
            g[name] = numba.njit(cache=True, error_model="numpy", nogil=True)(g[name])
        except RuntimeError:            # "cannot cache function ...: no locator available"
            g[name] = numba.njit(cache=False, error_model="numpy", nogil=True)(g[name])


def compiled_entries(g, names, entries):
    """The compiled entry points ``entries`` (a tuple) of the module namespace ``g`` for the current
    :func:`backend`: the AOT module's exports, or (JIT) the functions ``names`` compiled in place on first use
    (:func:`compile_globals`).  Kept in ``g["_ENTRY_<backend>"]``."""
    kind = backend()
    key = "_ENTRY_" + kind
    if g.get(key) is None:
        if kind == "aot":
            mod = aot_module()
            g[key] = tuple(getattr(mod, aot_name(g["__name__"], n)) for n in entries)
        else:
            compile_globals(g, names)
            g[key] = tuple(g[n] for n in entries)
    return g[key]
