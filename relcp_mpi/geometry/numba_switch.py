"""The switch of the optional compiled (numba) kernels: whether they are used, and how they are compiled.

numba is optional (Debian ``python3-numba``, installed by ``tools/setup.sh``; on a cluster ``pip install numba``
or nothing).  The compiled twins (``ellipsoid_jit``, ``spherocylinder_jit``) replace numpy kernels for large
batches when numba is installed and ``RELCP_NUMBA`` is not ``0``; both paths give the same bits.  numba is
imported only when a kernel is first used, so that processes that never call one do not pay for the import.
"""
import importlib.util
import os

AVAILABLE = os.environ.get("RELCP_NUMBA", "1") != "0" and importlib.util.find_spec("numba") is not None


def enabled():
    """True when the compiled kernels are used (numba is installed and ``RELCP_NUMBA`` is not ``0``)."""
    return AVAILABLE and os.environ.get("RELCP_NUMBA", "1") != "0"


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
    """The compiled entry points ``entries`` (a tuple) of the module namespace ``g``: on first use the functions
    ``names`` are compiled in place (:func:`compile_globals`); kept in ``g["_ENTRY"]``."""
    if g.get("_ENTRY") is None:
        compile_globals(g, names)
        g["_ENTRY"] = tuple(g[n] for n in entries)
    return g["_ENTRY"]
