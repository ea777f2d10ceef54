"""Ahead-of-time build of the compiled kernels into the plain CPython extension ``relcp_mpi.geometry._kernels_aot``
(numba's ``pycc``), which needs neither numba nor LLVM at run time (geometry/numba_switch.py).

    python -m relcp_mpi.geometry.aot_build [--out DIR] [--force]

builds ``_kernels_aot<ext suffix>`` into DIR (default: this package's directory) unless a build of the current
sources is there already (``--force``: always).  Run by ``tools/setup.sh`` and by ``setup.py``'s ``build_py`` when
numba is importable at build time; needs numba and a C compiler with the Python headers.

Nothing is written twice: the exported functions are the kernel modules' own entry points (``_ENTRIES`` with
their ``AOT_SIGNATURES``), compiled by numba exactly as the JIT path compiles them (``compile_globals``: numpy
error model, no fastmath) and called through a trampoline without arithmetic (pycc compiles an exported function
itself with Python's error model, x / 0 raising; the trampolines leave every operation to the numba-compiled
entry).  The code is generated for the generic x86-64 (or other host architecture) CPU: no FMA, which numba would
not use without fastmath either, so the bits are those of the JIT and of numpy (tests/test_kernels_*).
The module also exports ``fingerprint()``: :func:`numba_switch.source_fingerprint` of the sources it was built from.
"""
import argparse
import glob
import importlib.util
import os
import sys
import sysconfig

NAME = "_kernels_aot"
KERNEL_MODULES = ("relcp_mpi.geometry.ellipsoid_jit", "relcp_mpi.geometry.spherocylinder_jit",
                  "relcp_mpi.contact.neighbors_jit", "relcp_mpi.solver.operator_jit", "relcp_mpi.solver.vector_jit")


def _trampoline(fn, nargs):
    """A function of nargs positional arguments that returns ``fn(*args)`` (pycc exports need a fixed arity)."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    ns = {"fn": fn}
    exec(f"def trampoline({args}):\n    return fn({args})\n", ns)     # noqa: S102 (generated arity only)
    return ns["trampoline"]


def built_fingerprint(out_dir):
    """The fingerprint of the AOT build in out_dir (imported in a fresh interpreter), or None without one."""
    import subprocess
    path = glob.glob(os.path.join(out_dir, NAME + "*" + sysconfig.get_config_var("EXT_SUFFIX")))
    if not path:
        return None
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location(%r, %r); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print(m.fingerprint())"
            % ("relcp_mpi.geometry." + NAME, path[0]))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(res.stdout) if res.returncode == 0 else None


def build(out_dir, force=False):
    """Build the extension into out_dir (see module docstring); returns its path, or None if it was up to date."""
    import importlib

    from numba.pycc import CC

    from relcp_mpi.geometry import numba_switch
    fp = numba_switch.source_fingerprint()
    if not force and built_fingerprint(out_dir) == fp:
        return None
    cc = CC(NAME)
    cc.output_dir = out_dir
    cc.verbose = False
    for modname in KERNEL_MODULES:
        mod = importlib.import_module(modname)
        g = vars(mod)
        numba_switch.compile_globals(g, mod._JIT_NAMES)     # the JIT's compilation (numpy error model, no fastmath)
        for entry in mod._ENTRIES:
            sig = mod.AOT_SIGNATURES[entry]
            nargs = g[entry].py_func.__code__.co_argcount
            cc.export(numba_switch.aot_name(modname, entry), sig)(_trampoline(g[entry], nargs))
    ns = {}
    exec(f"def fingerprint():\n    return {fp}\n", ns)                  # noqa: S102 (a constant)
    cc.export("fingerprint", "i8()")(ns["fingerprint"])
    cc.compile()
    return os.path.join(out_dir, cc.output_file)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)), help="output directory")
    ap.add_argument("--force", action="store_true", help="rebuild even when a build of these sources exists")
    a = ap.parse_args(argv)
    if importlib.util.find_spec("numba") is None:
        print("[aot] numba is not installed: no AOT kernels (the numpy kernels are used)")
        return 0
    path = build(a.out, a.force)
    print(f"[aot] built {path}" if path else "[aot] up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
