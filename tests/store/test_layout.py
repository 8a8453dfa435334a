"""Version folder names, ``run@version`` references and the retention rule, checked by hand."""

from __future__ import annotations

import math

import pytest

from store import parse_ref, parse_version_dir, version_dir
from store.retention import versions_to_keep


@pytest.mark.parametrize("version, name", [(1, "ckpt-00000001"), (42, "ckpt-00000042"), (123456789, "ckpt-123456789")])
def test_version_folders_have_at_least_eight_digits_and_parse_back(version, name):
    assert version_dir(version) == name
    assert parse_version_dir(name) == version


@pytest.mark.parametrize("name", ["ckpt-1", "ckpt-0000001", "ckpt-0000000x", "CKPT-00000001", "ckpt-00000001.tmp", ""])
def test_other_names_are_no_version_folders(name):
    assert parse_version_dir(name) is None


@pytest.mark.parametrize(
    "ref, parsed",
    [("r", ("r", None)), ("r@latest", ("r", None)), ("r@3", ("r", 3)), ("my-run.v2@0012", ("my-run.v2", 12))],
)
def test_refs_name_a_run_and_a_version_or_the_newest(ref, parsed):
    assert parse_ref(ref) == parsed


@pytest.mark.parametrize(
    "ref, problem",
    [
        ("@3", "no run name"),
        ("r@0", "'0' is neither"),
        ("r@x", "'x' is neither"),
        ("r@-1", "neither"),
        ("r@", "neither"),
    ],
)
def test_malformed_refs_say_what_is_wrong(ref, problem):
    with pytest.raises(ValueError, match=problem):
        parse_ref(ref)


def test_retention_keeps_the_newest_and_the_best_with_ties_to_the_newer():
    versions = [1, 2, 3, 4, 5, 6]
    scores = {1: 0.5, 2: 0.1, 3: 0.1, 4: math.nan, 5: True, 6: None}  # NaN, bools and None never count
    assert versions_to_keep(versions, keep_last=2, keep_best=1, scores=scores, mode="min") == {3, 5, 6}
    assert versions_to_keep(versions, keep_last=1, keep_best=2, scores=scores, mode="min") == {2, 3, 6}
    assert versions_to_keep(versions, keep_last=1, keep_best=1, scores=scores, mode="max") == {1, 6}
    assert versions_to_keep(versions, keep_last=3, keep_best=0, scores=scores) == {4, 5, 6}
    assert versions_to_keep([], keep_last=1, scores={}) == set()


def test_retention_never_counts_a_version_that_is_not_intact_and_asks_only_of_candidates():
    versions = [1, 2, 3, 4, 5, 6]
    asked: list[int] = []

    def intact(version: int) -> bool:
        asked.append(version)
        return version not in (2, 6)

    scores = {1: 0.3, 2: 0.1, 3: 0.2, 4: 0.9, 5: 0.9, 6: 0.0}  # by "min": 6, 2, 3, 1...
    assert versions_to_keep(versions, keep_last=3, keep_best=1, scores=scores, intact=intact) == {3, 4, 5}
    assert asked == [6, 5, 4, 3, 6, 2]  # newest first until 3 intact, then best first until 1 intact
    asked.clear()
    assert versions_to_keep(versions, keep_last=2, keep_best=1, scores=scores, intact=intact) == {3, 4, 5}
    assert asked == [6, 5, 4, 6, 2, 3]
    assert versions_to_keep(versions, keep_last=9, keep_best=0, intact=intact) == {1, 3, 4, 5}
    assert versions_to_keep(versions, keep_last=2, keep_best=1, scores=scores, intact=lambda v: False) == set()


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        (dict(keep_last=0), "keep_last"),
        (dict(keep_last=True), "keep_last"),
        (dict(keep_best=-1), "keep_best"),
        (dict(mode="median"), "mode"),
    ],
)
def test_retention_arguments_are_checked(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        versions_to_keep([1, 2], **{"keep_last": 1, **kwargs})
