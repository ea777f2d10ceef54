"""Certified event-driven sphere engine (seed 001), in exact rational arithmetic.

Modules
-------
* :mod:`.exact`        -- Fractions and quadratic surds ``a + b sqrt(d)`` with exact sign comparisons;
  certified rational bounds of sqrt and exp.
* :mod:`.first_impact` -- :func:`first_impact`, the one-dimensional first-impact step (every seed branch).
* :mod:`.impulse`      -- :func:`binary_impulse` (any dimension) and the exact reset extension.
* :mod:`.bounds`       -- guard / normal / reset Lipschitz constants ``sqrt 2``, ``2 sqrt 2 / sigma``, ``L_R``.
* :mod:`.provider`     -- exact certificate provider (pair guards, brackets, ordering, ledger terms).
* :mod:`.simulator`    -- :func:`simulate`, the certified event-driven loop (optionally MPI-split pair scan).
* :mod:`.deck`         -- ``engine: event_driven`` decks and :func:`run_event_deck` (HDF5 output).
"""
from .exact import QuadSurd, to_fraction, sqrt_down, sqrt_up, exp_up
from .first_impact import FirstImpactResult, first_impact
from .impulse import (ImpactError, NotAtContactError, NotApproachingError, ImpulseResult, binary_impulse,
                      pair_reset, kinetic_energy)
from .bounds import (guard_lipschitz, normal_lipschitz, normal_lipschitz_relative, reset_lipschitz,
                     guard_lipschitz_upper, normal_lipschitz_upper, reset_lipschitz_upper)
from .provider import REASONS
from .simulator import Event, EventResult, Segment, simulate, COMPLETE, UNRESOLVED
from .deck import parse_event_deck, run_event_deck

__all__ = ["QuadSurd", "to_fraction", "sqrt_down", "sqrt_up", "exp_up", "FirstImpactResult", "first_impact",
           "ImpactError", "NotAtContactError", "NotApproachingError", "ImpulseResult", "binary_impulse",
           "pair_reset", "kinetic_energy", "guard_lipschitz", "normal_lipschitz", "normal_lipschitz_relative",
           "reset_lipschitz", "guard_lipschitz_upper", "normal_lipschitz_upper", "reset_lipschitz_upper",
           "REASONS", "Event", "EventResult", "Segment", "simulate", "COMPLETE", "UNRESOLVED",
           "parse_event_deck", "run_event_deck"]
