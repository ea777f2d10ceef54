"""The result of every SNSD kernel (the geometry contract, see docs/ARCHITECTURE.md)."""
from dataclasses import dataclass

import numpy as np


@dataclass
class ContactGeometry:
    sep: np.ndarray        # (m,)   signed separation [L], negative = overlap
    normal: np.ndarray     # (m, 3) unit, from j towards i
    p_i: np.ndarray        # (m, 3) witness point on the surface of i (lab frame)
    p_j: np.ndarray        # (m, 3) witness point on the surface of j
    converged: np.ndarray  # (m,)   bool

    def __len__(self):
        return self.sep.shape[0]

    @staticmethod
    def concatenate(parts):
        """One ContactGeometry of the pairs of ``parts`` (a non-empty list), in order."""
        if len(parts) == 1:
            return parts[0]
        return ContactGeometry(*(np.concatenate([getattr(p, f) for p in parts])
                                 for f in ("sep", "normal", "p_i", "p_j", "converged")))
