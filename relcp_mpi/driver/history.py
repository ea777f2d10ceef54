"""The in-memory per-step diagnostics of a run (``Simulation.history``), bounded.

Each step's diagnostics dict takes ~0.5-1.5 kB; kept for every step, a production run of 10^6 steps would
grow by a gigabyte per rank.  :class:`StepHistory` keeps the newest ``maxlen`` entries (default
:data:`HISTORY_LENGTH`; ``None`` = unbounded) and counts the ones it dropped.  The full record of a run is on
disk: the trajectory's ``/diagnostics`` table (every written frame) and the GSD log.
"""
import collections
import itertools

# entries kept by default (~0.5-1.5 MiB per rank at most)
HISTORY_LENGTH = 1000


class StepHistory:
    """The newest ``maxlen`` per-step diagnostics dicts, oldest first; reads like a list (``len``, iteration,
    ``h[i]``, ``h[i:j]`` -> list).  ``dropped``: how many older entries were discarded (``h[0]`` is the
    ``dropped + 1``-th entry appended)."""

    def __init__(self, maxlen=HISTORY_LENGTH):
        self._items = collections.deque(maxlen=maxlen)
        self.dropped = 0

    @property
    def maxlen(self):
        return self._items.maxlen

    @maxlen.setter
    def maxlen(self, value):
        """Change the bound (the oldest entries beyond it are dropped)."""
        keep = list(self._items)
        if value is not None and len(keep) > value:
            self.dropped += len(keep) - value
            keep = keep[len(keep) - value:]
        self._items = collections.deque(keep, maxlen=value)

    def append(self, diag):
        if self._items.maxlen is not None and len(self._items) == self._items.maxlen:
            self.dropped += 1
        self._items.append(diag)

    def clear(self):
        self.dropped += len(self._items)
        self._items.clear()

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self._items))
            if step == 1:
                return list(itertools.islice(self._items, start, max(start, stop)))
            return list(self._items)[index]
        return self._items[index]

    def __repr__(self):
        return f"StepHistory({len(self)} entries, maxlen={self.maxlen}, dropped={self.dropped})"
