"""Derived seeds: one seed per component of a run (a rollout actor, its replacement after a crash, a
sub-env of a vector env), derived from the run's seed by a hash.

Arithmetic such as ``seed + 1000 * worker_id`` makes neighbouring runs share streams (worker 1 of
seed 0 is worker 0 of seed 1000; sub-env 1 of seed 5 is sub-env 0 of seed 6); a hash of the whole
tuple keeps every ``(base, *parts)`` apart. Every derived seed in the project comes from
:func:`derive_seed`.
"""

from __future__ import annotations

import hashlib
import numbers

__all__ = ["SEED_BITS", "derive_seed"]

SEED_BITS = 31  # derived seeds lie in [0, 2**31): what numpy, torch, gymnasium and Ray all take


def derive_seed(base: int, *parts: int) -> int:
    """The seed of component ``parts`` (ints, e.g. ``(slot, restarts)``) of a run seeded with ``base``,
    in ``[0, 2**31)``.

    The 8-byte blake2b digest (personalised ``splatdrive-seed``) of the ints written in decimal and
    joined by commas, read little-endian, its top 31 bits. Deterministic on every platform and Python
    process (unlike ``hash()``); tuples of different lengths are different texts (``(1, 2)``,
    ``(1, 2, 0)``, ``(12,)``), so two different tuples share a seed only by a hash collision (a chance
    of 2**-31 per pair). Takes ints and numpy integers; raises TypeError naming any other value.
    """
    values = (base, *parts)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):  # ints and numpy integers
            raise TypeError(f"derive_seed: base and parts must be ints, got {v!r} ({type(v).__name__}) in {values}")
    text = ",".join(str(int(v)) for v in values).encode("ascii")
    digest = hashlib.blake2b(text, digest_size=8, person=b"splatdrive-seed").digest()
    return int.from_bytes(digest, "little") >> (64 - SEED_BITS)
