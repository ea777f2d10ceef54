"""ContactGeometry's row selection (take / where / concatenate) keeps every field of a row together."""
import numpy as np

from relcp_mpi.geometry.result import ContactGeometry


def _geo(rng, m, offset):
    n = rng.normal(size=(m, 3))
    return ContactGeometry(sep=offset + np.arange(m, dtype=float), normal=n / np.linalg.norm(n, axis=1)[:, None],
                           p_i=rng.normal(size=(m, 3)), p_j=rng.normal(size=(m, 3)),
                           converged=rng.random(m) < 0.5)


def _rows(g):
    return [(g.sep[k], *g.normal[k], *g.p_i[k], *g.p_j[k], g.converged[k]) for k in range(len(g))]


def test_take_where_and_concatenate_move_whole_rows():
    rng = np.random.default_rng(3)
    a, b = _geo(rng, 7, 0.0), _geo(rng, 7, 100.0)
    mask = np.array([1, 0, 0, 1, 1, 0, 1], bool)
    ra, rb = _rows(a), _rows(b)

    t = a.take(mask)
    assert _rows(t) == [r for r, k in zip(ra, mask) if k]
    assert _rows(a.take(np.array([5, 0, 5]))) == [ra[5], ra[0], ra[5]]
    assert len(a.take(np.zeros(7, bool))) == 0 and a.take(np.zeros(7, bool)).normal.shape == (0, 3)

    w = a.where(mask, b)
    assert _rows(w) == [ra[k] if mask[k] else rb[k] for k in range(7)]
    assert w.converged.dtype == bool and w.normal.shape == (7, 3)

    c = ContactGeometry.concatenate([a, t, b])
    assert _rows(c) == ra + _rows(t) + rb
    assert ContactGeometry.concatenate([a]) is a
