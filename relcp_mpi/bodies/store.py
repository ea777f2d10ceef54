"""Structure-of-arrays store of rigid bodies (the owned bodies of one rank, or ghosts).

Fields (n = number of bodies):

* ``gid``   int64 (n,)     global id, unique across ranks and time
* ``kind``  int8  (n,)     shape code (see :mod:`relcp_mpi.bodies.shapes`)
* ``shape`` float (n, 3)   shape parameters
* ``x``     float (n, 3)   centre position [L]
* ``q``     float (n, 4)   unit orientation quaternion (w, x, y, z)
* ``u``     float (n, 6)   last generalized velocity (linear [L/T], angular [1/T])
* ``f_ext`` float (n, 6)   external force [F] and torque [F L]
* ``u_imp`` float (n, 6)   imposed velocity added after mobility [L/T, 1/T]
* ``growth`` float (n,)    axial growth rate for spherocylinders [L/T] (0 = none)
* ``l_div`` float (n,)     segment length L at which a growing spherocylinder divides [L] (0 = never)
* ``fixed`` int8 (n,)      1 = fixed body: zero mobility, moves only with its imposed velocity ``u_imp``
* ``gen``   int64 (n,)     generation of a dividing cell (0 = initial body, +1 at every division); with the
                           gid it keys the cell's random division length (:mod:`relcp_mpi.physics.growth`)
* ``row``   int64 (n,)     global block-row index of the body in the current distributed D matrix (set by
                           the stepper each step before ghost exchange so ghosts carry it; not physical state)

All per-body data travels together through :meth:`pack` / :meth:`unpack`, which migration, ghost
exchange and checkpoints use, so a new field added to ``FIELDS`` is carried everywhere.
"""
import numpy as np

# name -> (dtype, trailing shape)
FIELDS = {
    "gid": (np.int64, ()),
    "kind": (np.int8, ()),
    "shape": (np.float64, (3,)),
    "x": (np.float64, (3,)),
    "q": (np.float64, (4,)),
    "u": (np.float64, (6,)),
    "f_ext": (np.float64, (6,)),
    "u_imp": (np.float64, (6,)),
    "growth": (np.float64, ()),
    "l_div": (np.float64, ()),
    "fixed": (np.int8, ()),
    "gen": (np.int64, ()),
    "row": (np.int64, ()),
}


def _width(tshape):
    return int(np.prod(tshape)) if tshape else 1


PACK_WIDTH = sum(_width(t) for _, t in FIELDS.values())

# name -> slice of that field's columns in a packed row (pack / unpack / BodyStore.pack_columns)
_COLUMNS, _c = {}, 0
for _name, (_, _tshape) in FIELDS.items():
    _COLUMNS[_name] = slice(_c, _c + _width(_tshape))
    _c += _width(_tshape)


class BodyStore:
    """Owned (or ghost) bodies of one rank as parallel numpy arrays."""

    def __init__(self, n=None, **arrays):
        if n is None:
            given = [a for a in arrays.values() if a is not None]
            n = len(np.asarray(given[0])) if given else 0
        for name, (dtype, tshape) in FIELDS.items():
            if name in arrays and arrays[name] is not None:
                a = np.array(arrays[name], dtype=dtype).reshape((-1,) + tshape)
            else:
                a = np.zeros((n,) + tshape, dtype=dtype)
                if name == "q":
                    a[:, 0] = 1.0
            setattr(self, name, a)
        unknown = set(arrays) - set(FIELDS)
        if unknown:
            raise KeyError(f"unknown body fields {sorted(unknown)}")
        lens = {len(getattr(self, f)) for f in FIELDS}
        if len(lens) != 1:
            raise ValueError(f"body arrays have inconsistent lengths {sorted(lens)}")

    # -- basic container behaviour -------------------------------------------------------------
    def __len__(self):
        return len(self.gid)

    @property
    def n(self):
        return len(self.gid)

    def arrays(self):
        """Dict of field name -> array (views, not copies)."""
        return {f: getattr(self, f) for f in FIELDS}

    def copy(self):
        return BodyStore(**{f: a.copy() for f, a in self.arrays().items()})

    def take(self, idx):
        """New store with the bodies selected by an index array or boolean mask (not a slice: the new store's
        arrays must be copies, fancy indexing makes them)."""
        if isinstance(idx, slice):
            idx = np.arange(self.n)[idx]
        return BodyStore._adopt({f: a[idx] for f, a in self.arrays().items()})

    @staticmethod
    def _adopt(arrays):
        """A store holding ``arrays`` themselves (every field, already of its dtype and shape: no copy, no
        checks).  The stepper reorders all bodies twice per step; the constructor's conversion copies doubled
        that cost (10k bodies: ~10 ms of a 0.1 s step)."""
        out = BodyStore.__new__(BodyStore)
        for name in FIELDS:
            setattr(out, name, arrays[name])
        return out

    @staticmethod
    def pack_columns(name):
        """Slice of the columns of field ``name`` in the rows of :meth:`pack`."""
        return _COLUMNS[name]

    @staticmethod
    def concatenate(stores):
        stores = list(stores)
        if not stores:
            return BodyStore(0)
        return BodyStore(**{f: np.concatenate([getattr(s, f) for s in stores]) for f in FIELDS})

    def sort_by_gid(self):
        """Return a copy ordered by increasing global id."""
        return self.take(np.argsort(self.gid, kind="stable"))

    # -- serialisation for MPI and I/O ------------------------------------------------------
    def pack(self, idx=None):
        """All fields of the selected bodies as one float64 array of shape (m, PACK_WIDTH).

        int64 ids are stored exactly (|gid| < 2**53 is required and checked)."""
        sel = self if idx is None else self.take(idx)
        if sel.n and np.abs(sel.gid).max() >= 2 ** 53:
            raise OverflowError("global ids must be < 2**53 to be packed into float64")
        cols = [getattr(sel, f).reshape(sel.n, _width(t)).astype(np.float64) for f, (_, t) in FIELDS.items()]
        return np.concatenate(cols, axis=1)

    @staticmethod
    def unpack(buf):
        """Inverse of :meth:`pack`."""
        buf = np.asarray(buf, dtype=np.float64).reshape(-1, PACK_WIDTH)
        out = {}
        for name, (dtype, tshape) in FIELDS.items():
            col = buf[:, _COLUMNS[name]]
            if np.issubdtype(dtype, np.integer):
                col = np.rint(col)
            out[name] = col.astype(dtype).reshape((-1,) + tshape)
        return BodyStore._adopt(out)
