"""Built-in suites: built once, atomically, shard by shard, whoever asks first; a prefix builds only its
shards; val and test places never in train; sizes for quick checks; and no hang on first use, from a script
without a ``__main__`` guard, for a waiter on a stuck builder, or for a spawned child."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from scenarios import builtin, generation
from scenarios.format import KINDS
from scenarios.io import ScenarioError

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 900  # a run that has not ended by then is hung: the failure these tests exist to catch


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache, default suite sizes and lock timeout whatever the caller's environment says."""
    monkeypatch.setenv("SPLATDRIVE_CACHE", str(tmp_path))
    for var in (builtin.PER_KIND_VAR, builtin.GAUSSIANS_VAR, builtin.LOCK_TIMEOUT_VAR):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _fake_generate(calls: list, delay: float = 0.3):
    def fake(out, suite, count, seed, kinds, gaussians, **kw):
        calls.append(dict(suite=suite, count=count, gaussians=gaussians, seed=seed, variants=kw["variants"]))
        time.sleep(delay)  # long enough for the other threads to pile up on the lock
        Path(out).mkdir(parents=True)
        ids = [f"{suite}-s{seed}-{i}" for i in range(count)]
        (Path(out) / "suite.yaml").write_text(yaml.safe_dump({"scenarios": [{"id": i} for i in ids]}))
        return []

    return fake


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.update({k: str(v) for k, v in extra.items()})
    return env


# -- built once, atomically ---------------------------------------------------------------------------


def test_builtin_suite_built_once_under_concurrency(cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(generation, "generate_suite", _fake_generate(calls))
    got = []
    threads = [
        threading.Thread(target=lambda: got.append(builtin.builtin_suite("val", progress=False))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [dict(suite="val", count=70, gaussians=100_000, seed=0, variants=2)]  # one shard
    want = cache / "scenarios" / f"builtin-val-v{builtin.BUILTIN_VERSION}"
    assert got == [want] * 4 and (want / "suite.yaml").is_file() and (want / "shard-00" / "suite.yaml").is_file()
    assert not list(want.glob(".tmp-*"))
    assert builtin.builtin_suite("val") == want and len(calls) == 1  # cached now
    assert builtin.is_generated("val") and not builtin.is_generated("test")


def test_builtin_suite_failed_build_leaves_nothing(cache, monkeypatch):
    def boom(out, **kw):
        Path(out).mkdir(parents=True)
        (Path(out) / "half.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(generation, "generate_suite", lambda out, *a, **kw: boom(out))
    with pytest.raises(RuntimeError, match="disk full"):
        builtin.builtin_suite("test", progress=False)
    lock = cache / "scenarios" / f"builtin-test-v{builtin.BUILTIN_VERSION}" / ".shard-00.lock"
    assert list(lock.parent.iterdir()) == [lock]
    assert lock.read_text() == ""  # the holder's note is cleared on release
    with pytest.raises(ValueError, match="built-in suites are train, val, test"):
        builtin.builtin_suite("huge")


def test_smaller_suites_from_the_environment_live_in_their_own_folder(cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(generation, "generate_suite", _fake_generate(calls, delay=0))
    monkeypatch.setenv(builtin.PER_KIND_VAR, "1")
    monkeypatch.setenv(builtin.GAUSSIANS_VAR, "4000")
    got = builtin.builtin_suite("val", progress=False)
    assert got.name == f"builtin-val-v{builtin.BUILTIN_VERSION}-1x4000"
    assert calls == [dict(suite="val", count=len(KINDS), gaussians=4000, seed=0, variants=1)]
    assert (
        builtin.suite_folder("val", per_kind=builtin.BUILTIN_SUITES["val"], gaussians=100_000).name
        == f"builtin-val-v{builtin.BUILTIN_VERSION}"
    )
    monkeypatch.setenv(builtin.PER_KIND_VAR, "none")
    with pytest.raises(ValueError, match=r"SPLATDRIVE_BUILTIN_PER_KIND='none': expected a int >= 1"):
        builtin.builtin_suite("val")
    monkeypatch.setenv(builtin.PER_KIND_VAR, "1")
    monkeypatch.setenv(builtin.GAUSSIANS_VAR, "10")
    with pytest.raises(ValueError, match="SPLATDRIVE_BUILTIN_GAUSSIANS='10'"):
        builtin.builtin_suite("val")


def test_train_is_built_in_shards_and_a_prefix_builds_only_its_own(cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(generation, "generate_suite", _fake_generate(calls, delay=0))
    plan = builtin.shards("train")
    assert [(s.count, s.seed, s.variants) for s in plan] == [(112, 14 * k, 8) for k in range(9)]
    files = builtin.builtin_files("train:250", progress=False)  # 3 shards of 112 hold the first 250
    assert [c["seed"] for c in calls] == [0, 14, 28] and not builtin.is_generated("train")
    assert builtin.is_generated("train:250") and builtin.is_generated("train:336")  # what 3 shards hold
    assert not builtin.is_generated("train:337") and not builtin.is_generated("val:1")
    root = builtin.suite_folder("train")
    assert files[0] == root / "shard-00" / "train-s0-0.json" and files[-1] == root / "shard-02" / "train-s28-25.json"
    assert len(files) == 250
    assert len(builtin.builtin_files("train:100", progress=False)) == 100 and len(calls) == 3  # built already
    assert len(builtin.builtin_files("train", progress=False)) == 1008 and len(calls) == 9
    manifest = yaml.safe_load((root / "suite.yaml").read_text())  # every shard there: the whole suite's
    assert manifest["scenarios"] == 1008 and [s["name"] for s in manifest["shards"]][-1] == "shard-08"
    for bad, why in (("train:0", "a count of scenarios >= 1"), ("train:x", "<name>:<count>"), ("tran:5", "unknown")):
        with pytest.raises(ValueError, match=why):
            builtin.parse_spec(bad)
    with pytest.raises(ScenarioError, match="holds 1008 scenarios, fewer than 2000"):
        builtin.builtin_files("train:2000", progress=False)


def test_no_val_or_test_background_is_used_in_train():
    """From the suites' shard plans (nothing is built): place ids and seeds of val and test are not train's."""
    places = {name: builtin.planned_places(name, per_kind=n) for name, n in builtin.BUILTIN_SUITES.items()}
    assert [len(places[n]) for n in ("train", "val", "test")] == [126, 35, 70]
    for name in ("val", "test"):
        for i in (0, 2):  # ids (background file names) and seeds (what the background is drawn from)
            assert not {p[i] for p in places[name]} & {p[i] for p in places["train"]}, name
    assert not {p[2] for p in places["val"]} & {p[2] for p in places["test"]}
    for name, ps in places.items():  # every kind in the same number of places
        assert len(set(Counter(p[1] for p in ps).values())) == 1, name


def test_load_suite_takes_folders_and_builtin_names(cache, tmp_path, monkeypatch):
    from scenarios import load_suite

    with pytest.raises(ScenarioError, match="nor a built-in suite"):
        load_suite(tmp_path / "nope")
    calls: list = []
    monkeypatch.setattr(generation, "generate_suite", _fake_generate(calls, delay=0))
    # the fake shards list scenarios but hold no files: every one is broken, and the error says so
    with pytest.raises(ScenarioError, match="test:3: 3 of 3 scenario files are broken"):
        load_suite("test:3")
    assert [c["suite"] for c in calls] == ["test"]  # a prefix in the first shard builds only that shard
    with pytest.raises(ScenarioError, match="140 of 140 scenario files are broken"):
        load_suite("test")
    assert [c["seed"] for c in calls] == [0, 35]


# -- a waiter never hangs ------------------------------------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from scenarios import builtin
lock, mode = Path(sys.argv[1]), sys.argv[2]
with builtin.suite_lock(lock, "a test holder") as h:
    print("held", flush=True)
    if mode == "stuck":
        time.sleep(600)
    else:  # a slow build that makes progress, then completes the suite
        for k in range(1, 9):
            time.sleep(0.4)
            h.progress(k, 8)
        final = Path(sys.argv[3])
        final.mkdir(parents=True)
        (final / "suite.yaml").write_text("suite: x\\n")
"""


def _hold(lock: Path, mode: str, final: Path | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), mode, str(final or "")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    line = proc.stdout.readline()
    assert line.strip() == "held", proc.stderr.read()
    return proc


def test_a_waiter_gives_up_on_a_stuck_holder_and_names_its_pid(cache, monkeypatch):
    monkeypatch.setattr(generation, "generate_suite", _fake_generate([], delay=0))
    lock = builtin.lock_path("val")
    lock.parent.mkdir(parents=True)
    holder = _hold(lock, "stuck")
    try:
        assert builtin.read_holder(lock)["pid"] == holder.pid
        with pytest.raises(builtin.SuiteLockTimeout) as e:
            builtin.builtin_suite("val", progress=False, lock_timeout=1.0)
        msg = str(e.value)
        assert f"held by pid {holder.pid} on " in msg and "a test holder" in msg, msg
        assert f"kill {holder.pid}" in msg and "SPLATDRIVE_LOCK_TIMEOUT" in msg
        monkeypatch.setenv(builtin.LOCK_TIMEOUT_VAR, "0.5")  # the variable sets the default
        with pytest.raises(builtin.SuiteLockTimeout, match=f"after 0 s without progress .* pid {holder.pid}"):
            builtin.builtin_suite("val", progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert not builtin.is_generated("val")


def test_a_waiter_waits_as_long_as_the_holder_makes_progress(cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(generation, "generate_suite", _fake_generate(calls, delay=0))
    lock = builtin.lock_path("val")
    lock.parent.mkdir(parents=True)
    holder = _hold(lock, "progress", builtin.shard_folder("val", 0))
    try:
        # 3.2 s of building in steps of 0.4 s: longer than the timeout, never that long without progress
        got = builtin.builtin_suite("val", progress=False, lock_timeout=1.5)
    finally:
        holder.wait(timeout=60)
    assert got == builtin.suite_folder("val") and calls == []  # the holder built it, the waiter did not


# -- no hang on first use ------------------------------------------------------------------------------


def test_readme_snippet_in_a_script_without_main_guard_finishes_on_an_empty_cache(tmp_path):
    """README's three lines in a script with no ``if __name__ == "__main__":``, on an empty cache, with a
    tiny built-in suite (one scenario per kind, small backgrounds) generated by parallel workers: it ends,
    with the observation, and the suite generated once. (Workers that re-ran the script waited forever on
    the lock their parent held.)"""
    script = tmp_path / "first_use.py"
    script.write_text(
        textwrap.dedent(
            """
            import gymnasium as gym, envs
            env = gym.make("SplatDrive-v0", config={"suite": "val", "resolution": [32, 16]})
            obs, info = env.reset(seed=0)
            print("RESET", info["scenario"], sorted(obs), flush=True)
            """
        )
    )
    cache = tmp_path / "cache"
    env = _env(SPLATDRIVE_CACHE=cache, SPLATDRIVE_BUILTIN_PER_KIND=1, SPLATDRIVE_BUILTIN_GAUSSIANS=2000)
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("RESET")]
    assert line.split()[1].startswith("val-") and "cameras" in line
    folder = cache / "scenarios" / f"builtin-val-v{builtin.BUILTIN_VERSION}-1x2000"
    manifest = yaml.safe_load((folder / "shard-00" / "suite.yaml").read_text())
    assert len(manifest["scenarios"]) == len(KINDS)
    # the places it built are the ones its plan names
    assert [p["id"] for p in manifest["places"]] == [p[0] for p in builtin.planned_places("val", per_kind=1)]
    assert yaml.safe_load((folder / "suite.yaml").read_text())["scenarios"] == len(KINDS)


def test_a_spawned_child_rerunning_the_script_is_refused_while_its_parent_builds(tmp_path):
    """A guard-less script whose parent holds the suite's lock and starts a spawn child: the child, re-running
    the script while it starts, is told at once what to do instead of waiting on its parent forever."""
    script = tmp_path / "spawner.py"
    script.write_text(
        textwrap.dedent(
            """
            import multiprocessing as mp, os
            from scenarios import builtin
            if __name__ == "__main__":  # the parent; a spawned child re-runs this file as __mp_main__
                builtin.lock_path("val").parent.mkdir(parents=True, exist_ok=True)
                with builtin.suite_lock(builtin.lock_path("val"), "the parent's build"):
                    child = mp.get_context("spawn").Process(target=print, args=("child ran",))
                    child.start()
                    child.join()
                    print("CHILD", os.getpid(), child.pid, child.exitcode, flush=True)
            else:  # what the parent's script does at its top level, as every spawned child re-runs it
                builtin.builtin_suite("val")
            """
        )
    )
    env = _env(SPLATDRIVE_CACHE=tmp_path / "cache", SPLATDRIVE_LOCK_TIMEOUT=60)  # a wait ends anyway
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("CHILD")]
    _, parent_pid, child_pid, code = line.split()
    assert code != "0" and "child ran" not in out.stdout
    assert f"this process (pid {child_pid}) is a multiprocessing child" in out.stderr, out.stderr[-3000:]
    assert f"the parent (pid {parent_pid}) holds" in out.stderr and "the parent's build" in out.stderr
    assert 'if __name__ == "__main__":' in out.stderr
