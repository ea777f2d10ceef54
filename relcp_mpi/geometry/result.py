"""The result of every SNSD kernel (the geometry contract, see docs/ARCHITECTURE.md)."""
from dataclasses import dataclass, fields

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

    def _fields(self):
        return [getattr(self, f.name) for f in fields(self)]

    def take(self, index):
        """The rows selected by ``index`` (a boolean mask of shape (m,) or an integer index array), in order."""
        return ContactGeometry(*(a[index] for a in self._fields()))

    def where(self, mask, other):
        """Rows of ``self`` where ``mask`` ((m,) bool) and of ``other`` (same length) elsewhere."""
        return ContactGeometry(*(np.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
                                 for a, b in zip(self._fields(), other._fields())))

    @staticmethod
    def concatenate(parts):
        """One ContactGeometry of the pairs of ``parts`` (a non-empty list), in order."""
        if len(parts) == 1:
            return parts[0]
        return ContactGeometry(*(np.concatenate(arrays) for arrays in zip(*(p._fields() for p in parts))))
