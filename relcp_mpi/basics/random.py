"""Counter-based random numbers keyed by (seed, step, gid): identical on any rank count and order.

A vectorised Philox4x32-10 (Salmon et al., SC'11; the Random123 generator) in numpy:

* key (2 x 32 bit)      = the 64-bit ``seed``
* counter (4 x 32 bit)  = (gid low 32 bits, gid high 32 bits, ``step``, word) with
  word = distribution tag (bit 31: 0 uniform, 1 normal) | ``stream`` << 16 | block index

so the numbers for one body depend only on (seed, step, gid, stream, distribution) and the column
index -- never on the array they are computed in.  Each Philox block gives 4 x 32 random bits =
two 53-bit uniforms; normals use the Box-Muller transform of such a pair.

Limits: 0 <= seed < 2**64, 0 <= step < 2**32, 0 <= stream < 2**15, at most 2**17 numbers per
body and call.  Use different ``stream`` values for independent draws at the same step
(``uniform`` and ``normal`` with the same stream are already independent).
"""
import numpy as np

__all__ = ["uniform", "normal", "philox4x32"]

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_MASK = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def philox4x32(counter, key, rounds=10):
    """Philox4x32 on arrays: ``counter`` (..., 4) and ``key`` (..., 2) of 32-bit values -> (..., 4) uint64.

    Values are held in uint64 so that the 32 x 32 -> 64 bit products are exact.
    """
    c = np.asarray(counter, dtype=np.uint64) & _MASK
    k = np.asarray(key, dtype=np.uint64) & _MASK
    c0, c1, c2, c3 = (c[..., i].copy() for i in range(4))
    k0, k1 = np.broadcast_to(k[..., 0], c0.shape).copy(), np.broadcast_to(k[..., 1], c0.shape).copy()
    for r in range(rounds):
        if r:
            k0 = (k0 + _W0) & _MASK
            k1 = (k1 + _W1) & _MASK
        p0 = _M0 * c0
        p1 = _M1 * c2
        hi0, lo0 = p0 >> _S32, p0 & _MASK
        hi1, lo1 = p1 >> _S32, p1 & _MASK
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return np.stack([c0, c1, c2, c3], axis=-1)


def _shape(size):
    if size is None:
        return ()
    if np.isscalar(size):
        return (int(size),)
    return tuple(int(s) for s in size)


def _bits(seed, step, gids, nblocks, tag, stream):
    seed, step, stream = int(seed), int(step), int(stream)
    if not 0 <= seed < 2 ** 64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if not 0 <= step < 2 ** 32:
        raise ValueError(f"step must be in [0, 2**32), got {step}")
    if not 0 <= stream < 2 ** 15:
        raise ValueError(f"stream must be in [0, 2**15), got {stream}")
    if nblocks > 2 ** 16:
        raise ValueError("at most 2**17 random numbers per body and call")
    g = np.asarray(gids, dtype=np.int64).reshape(-1).view(np.uint64)
    n = len(g)
    ctr = np.empty((n, nblocks, 4), dtype=np.uint64)
    ctr[..., 0] = (g & _MASK)[:, None]
    ctr[..., 1] = (g >> _S32)[:, None]
    ctr[..., 2] = np.uint64(step)
    word = (np.uint64(tag) << np.uint64(31)) | (np.uint64(stream) << np.uint64(16))
    ctr[..., 3] = word | np.arange(nblocks, dtype=np.uint64)[None, :]
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint64)
    return philox4x32(ctr, key)  # (n, nblocks, 4)


def _u53(hi, lo):
    """Two 32-bit words -> float64 uniform in [0, 1) with 53 random bits."""
    a = (hi >> np.uint64(5)).astype(np.float64)
    b = (lo >> np.uint64(6)).astype(np.float64)
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


def uniform(seed, step, gids, size=None, low=0.0, high=1.0, stream=0):
    """Uniform numbers in ``[low, high)``: array of shape ``(len(gids),) + size``, one row per gid."""
    shp = _shape(size)
    m = int(np.prod(shp)) if shp else 1
    nb = (m + 1) // 2
    w = _bits(seed, step, gids, nb, 0, stream)
    u = np.stack([_u53(w[..., 0], w[..., 1]), _u53(w[..., 2], w[..., 3])], axis=-1)
    u = u.reshape(len(w), 2 * nb)[:, :m]
    return (low + (high - low) * u).reshape((len(w),) + shp)


def normal(seed, step, gids, size=None, loc=0.0, scale=1.0, stream=0):
    """Standard normal numbers (Box-Muller) of shape ``(len(gids),) + size``, one row per gid."""
    shp = _shape(size)
    m = int(np.prod(shp)) if shp else 1
    nb = (m + 1) // 2
    w = _bits(seed, step, gids, nb, 1, stream)
    u1 = 1.0 - _u53(w[..., 0], w[..., 1])  # (0, 1]
    u2 = _u53(w[..., 2], w[..., 3])
    r = np.sqrt(-2.0 * np.log(u1))
    t = 2.0 * np.pi * u2
    z = np.stack([r * np.cos(t), r * np.sin(t)], axis=-1).reshape(len(w), 2 * nb)[:, :m]
    return (loc + scale * z).reshape((len(w),) + shp)
