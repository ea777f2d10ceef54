"""The LCP methods a deck or a caller may name, and the options a user may tune for each: one table.

This module imports nothing heavy (no PETSc): the deck validation (:mod:`relcp_mpi.config.deck`) reads it
before PETSc is initialised with the user's options.  Each entry names the module and the class (a subclass
of :class:`relcp_mpi.solver.base.LCPSolver`) that implement the method; :func:`solver_class` imports it on
first use.  A new method is one ``register(...)`` line here plus its module.
"""
import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MethodInfo:
    """name: what decks and ``solve_lcp(method=...)`` say; module/cls: the implementation; options:
    {option name: type} of the method's tunable options (besides tol, max_iter, mu); summary: one line."""
    name: str
    module: str
    cls: str
    options: dict = field(default_factory=dict)
    summary: str = ""


_METHODS = {}


def register(name, module, cls, options=None, summary=""):
    """Add a method (``name`` lower case) implemented by ``module.cls``."""
    _METHODS[name] = MethodInfo(name, module, cls, dict(options or {}), summary)


def method_names():
    """Registered method names, in registration order."""
    return tuple(_METHODS)


def method_info(name):
    """The :class:`MethodInfo` of ``name``; ValueError naming the known methods if there is none."""
    try:
        return _METHODS[str(name).lower()]
    except KeyError:
        raise ValueError("unknown method %r (LCP methods: %s)" % (name, ", ".join(_METHODS))) from None


def solver_class(name):
    """The implementing class of method ``name`` (imports its module: PETSc must be initialised)."""
    info = method_info(name)
    return getattr(importlib.import_module(info.module), info.cls)


_DIVERGENCE = {"divergence_every": int, "divergence_factor": float}    # early stop, solver/divergence.py
register("bbpgd", "relcp_mpi.solver.bbpgd", "BBPGD", {"step0": float, **_DIVERGENCE},
         "Barzilai-Borwein projected gradient (default)")
register("apgd", "relcp_mpi.solver.apgd", "APGD",
         {"L": float, "power_iters": int, "L_safety": float, "restart": bool, **_DIVERGENCE},
         "accelerated projected gradient with adaptive restart")
register("ipm", "relcp_mpi.solver.ipm", "IPM",
         {"max_newton": int, "ksp_rtol": float, "pc_type": str, "step_fraction": float, "refine": int, "reg": float,
          "refine_tol": float},
         "Mehrotra interior point, Newton steps on the body-dof system (MUMPS Cholesky or CG + AMG)")
for _t in ("bncg", "blmvm", "tron", "bnls", "bntr", "bqnls", "gpcg"):
    register("tao-" + _t, "relcp_mpi.solver.tao", "TaoSolver", {"tao_options": dict, "prefix": str},
             "PETSc TAO bound-constrained solver " + _t)
