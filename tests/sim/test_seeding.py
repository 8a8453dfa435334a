"""sim.seeding.derive_seed: the documented hash, in range, apart for different inputs, the same in every process."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

from sim.seeding import derive_seed


def by_hand(*values: int) -> int:
    """The docstring's recipe, written out: blake2b-64 of "a,b,c", little-endian, top 31 bits."""
    text = ",".join(str(v) for v in values).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8, person=b"splatdrive-seed").digest(), "little") // 2**33


@pytest.mark.parametrize("values", [(0,), (0, 1), (7, 2, 3), (-5, 0), (2**40, 1)])
def test_the_seed_is_the_documented_hash(values):
    assert derive_seed(*values) == by_hand(*values)


def test_seeds_are_in_range_and_apart_where_arithmetic_collided():
    grid = [(base, slot, restarts) for base, slot, restarts in itertools.product(range(100), range(16), range(4))]
    seeds = [derive_seed(*g) for g in grid]
    assert all(0 <= s < 2**31 for s in seeds)
    assert len(set(seeds)) == len(grid)
    # what seed + 1000 * worker_id and seed + i gave to two components at once
    assert derive_seed(0, 1) != derive_seed(1000, 0)
    assert derive_seed(5, 1) != derive_seed(6, 0)
    # tuples of other lengths are other inputs
    assert len({derive_seed(1, 2), derive_seed(1, 2, 0), derive_seed(12), derive_seed(1)}) == 4


def test_numpy_integers_count_as_ints_and_other_values_are_refused():
    assert derive_seed(np.int64(3), np.uint8(2)) == derive_seed(3, 2)
    for bad in (1.0, "1", None, True):
        with pytest.raises(TypeError, match=rf"must be ints, got {bad!r}"):
            derive_seed(0, bad)


def test_the_same_seed_in_another_process_with_another_hash_seed():
    code = "from sim.seeding import derive_seed; print(derive_seed(11, 2, 3))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout) == derive_seed(11, 2, 3)
