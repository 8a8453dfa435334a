"""Security: nothing read from a store, an export or a cache is unpickled; Ray heads started by the
project's scripts and docs listen on localhost with token authentication, and stop by their PID.

Run and checkpoint names cannot leave their folders: see ``tests/fuzz/test_fuzz_names.py``.
"""

from __future__ import annotations

import os
import pickle
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from learner import checkpoint as ckpt_io
from policy.exported import ExportError, check_pt2_archive
from policy.sources import PolicySourceError, resolve_policy_source
from store import CheckpointStore, bytes_to_tensors, from_json_bytes
from tests.s3_servers import REPO, free_port

PACKAGES = ("sim", "store", "scenarios", "envs", "policy", "rollout", "evaluation", "learner")


class Bomb:
    """Unpickling this writes a marker file: proof that something was unpickled."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('unpickled')",))


# --------------------------------------------------------------------------------------------------
# No unpickling in the code


UNSAFE = {
    "pickle module": re.compile(r"^\s*(import|from)\s+(c?pickle|cloudpickle|dill|joblib|shelve|marshal)\b", re.M),
    "pickle.load(s)": re.compile(r"\b(c?pickle|cloudpickle|dill|joblib|marshal)\.loads?\("),
    "torch.load without weights_only=True": re.compile(r"torch\.load\((?![^()]*weights_only\s*=\s*True)[^()]*\)"),
    "np.load with allow_pickle=True": re.compile(r"np\.load\([^()]*allow_pickle\s*=\s*True"),
    "yaml.load / unsafe_load": re.compile(r"yaml\.(unsafe_load|load|load_all|full_load)\("),
    "pandas read_pickle": re.compile(r"read_pickle\("),
}


def test_security_no_unpickling_in_the_code():
    """Greps every module of the packages (and the scripts) for loaders that unpickle."""
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")] + list((REPO / "scripts").glob("*"))
    assert len(files) > 50
    found = []
    for path in files:
        text = path.read_text(errors="replace")
        for what, pattern in UNSAFE.items():
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(REPO)}:{line}: {what}: {m.group(0)[:80]!r}")
    assert not found, "\n".join(found)
    # the patterns do catch what they look for
    assert UNSAFE["torch.load without weights_only=True"].search("torch.load(f, map_location='cpu')")
    assert not UNSAFE["torch.load without weights_only=True"].search("torch.load(f, weights_only=True)")
    assert UNSAFE["np.load with allow_pickle=True"].search("np.load(p, allow_pickle=True)")
    assert UNSAFE["pickle module"].search("import pickle\n")


# --------------------------------------------------------------------------------------------------
# Loaders refuse pickles


def _payloads(tmp: Path) -> dict[str, bytes]:
    """A raw pickle, and torch.save's zip (whose data.pkl unpickles), both carrying the bomb."""
    marker = tmp / "unpickled"
    buf = tmp / "torch.pt"
    torch.save({"w": torch.zeros(2), "x": Bomb(marker)}, buf)
    return {"pickle": pickle.dumps(Bomb(marker)), "torch.save": buf.read_bytes()}


@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
def test_security_checkpoint_loaders_refuse_a_pickle_payload(tmp_path, kind):
    payload = _payloads(tmp_path)[kind]
    marker = tmp_path / "unpickled"
    with pytest.raises(ValueError, match="safetensors"):
        bytes_to_tensors(payload)
    with pytest.raises(ValueError, match="JSON"):
        from_json_bytes(payload)
    # a checkpoint in the store whose every file is the payload, its manifest consistent with it
    store = tmp_path / "store"
    names = ["policy.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "trainer.json",
             "config.json", "metrics.json"]  # fmt: skip
    rs = CheckpointStore(store).run("r")
    v = rs.commit({n: payload for n in names}, {"iteration": 1})
    ck = rs.load(v)  # checksums match: the bytes are what was committed
    with pytest.raises(ValueError):
        ckpt_io.decode(ck.files)  # the training driver's resume
    with pytest.raises(ValueError):
        ckpt_io.policy_weights(ck.files)  # what init_from, export and evaluation read
    for source in (f"{store}/r", str(store / "r" / f"ckpt-{v:08d}")):
        with pytest.raises(PolicySourceError):
            resolve_policy_source(source)  # python -m policy.export / evaluation
    assert not marker.exists()


def test_security_export_loader_refuses_a_pickled_archive(tmp_path):
    """A torch.export archive carrying a pickle is refused before torch.export.load sees it."""
    marker = tmp_path / "unpickled"
    archive = tmp_path / "policy.pt2"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("policy/models/model.json", "{}")
        z.writestr("policy/data/sample_inputs/model.pt", pickle.dumps(Bomb(marker)))
    with pytest.raises(ExportError, match="pickled payload"):
        check_pt2_archive(archive)
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("policy/models/model.json", "{}")
        z.writestr("policy/data/weights/model_weights_config.json", '{"config": {"w": {"use_pickle": true}}}')
        z.writestr("policy/data/constants/model_constants_config.json", '{"config": {}}')
    with pytest.raises(ExportError, match="pickled"):
        check_pt2_archive(archive)
    assert not marker.exists()


def test_security_demonstrations_cache_is_never_unpickled(tmp_path, monkeypatch):
    """The demonstrations cache (.npz) holding a pickled object array is ignored and rebuilt."""
    from envs import demos
    from scenarios import save
    from tests.envs.handmade import straight_scenario

    monkeypatch.setenv("SPLATDRIVE_CACHE", str(tmp_path / "cache"))
    save(straight_scenario(tmp_path / "s", sid="plain", horizon=4), tmp_path / "s" / "plain.json")
    config = {"resolution": (32, 16), "render_backend": "cpu"}
    first = demos.expert_demonstrations(str(tmp_path / "s"), config)
    (cached,) = (tmp_path / "cache" / "demos").glob("demos-*.npz")
    marker = tmp_path / "unpickled"
    np.savez(cached.with_suffix(""), labels=np.array([Bomb(marker)], dtype=object), scenario_ids=np.array(["plain"]))
    again = demos.expert_demonstrations(str(tmp_path / "s"), config)
    assert not marker.exists()
    assert np.array_equal(again.labels, first.labels)


# --------------------------------------------------------------------------------------------------
# Ray heads: localhost and token auth


def test_security_scripts_and_docs_start_ray_heads_on_localhost_with_token_auth():
    """Every `ray start --head` in the README and the scripts binds the dashboard to 127.0.0.1, and the
    scripts turn token auth on; nothing in the packages opens a dashboard on all interfaces."""
    docs = [REPO / "README.md", REPO / "dev", *(REPO / "scripts").glob("*")]
    heads = 0
    for path in docs:
        text = path.read_text(errors="replace")
        assert "0.0.0.0" not in text or "do not bind it to 0.0.0.0" in text, path
        for m in re.finditer(r"ray\S*\"? start --head(?:[^\n]*\\\n)*[^\n]*", text):
            heads += 1
            assert "--dashboard-host 127.0.0.1" in m.group(0), f"{path}: {m.group(0)}"
            assert "RAY_AUTH_MODE=token" in text, f"{path} starts a Ray head without token auth"
    assert heads >= 1
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            text = path.read_text()
            assert not re.search(r"dashboard_host\s*=\s*['\"]0\.0\.0\.0", text), path


def _http_status(url: str, token: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _listening(port: int) -> list[str]:
    """Local addresses listening on TCP ``port`` (from /proc/net/tcp and tcp6; IPv4 as dotted quads)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                ip, p = local.split(":")
                if state == "0A" and int(p, 16) == port:
                    out.append(".".join(str(b) for b in bytes.fromhex(ip)[::-1]) if len(ip) == 8 else ip)
    return out


def _session(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid`` (the head runs in its own, from setsid)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(d.name))
    return pids


@pytest.mark.slow
def test_security_ray_head_script_localhost_token_auth_stopped_by_pid(tmp_path):
    """scripts/ray-head.sh: the job API answers 401 without the token and 200 with it, listens on
    127.0.0.1 only, and `stop` ends the head by its PID (no process of its session is left)."""
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32))  # this test's own token, not the user's
    ports = {"RAY_HEAD_PORT": free_port(), "RAY_DASHBOARD_PORT": free_port(), "RAY_CLIENT_PORT": free_port()}
    env = dict(
        os.environ,
        SPLATDRIVE_RAY_DIR=str(tmp_path / "head"),
        RAY_HEAD_TEMP=f"/tmp/sd-sec-{os.getpid()}",
        RAY_HEAD_NUM_CPUS="1",
        RAY_AUTH_TOKEN_PATH=str(token),
        RAY_BIN=str(Path(sys.executable).parent / "ray"),
        **{k: str(v) for k, v in ports.items()},
    )
    script = str(REPO / "scripts" / "ray-head.sh")
    pid = None
    try:
        start = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=300)
        assert start.returncode == 0, start.stdout + start.stderr
        pid = int((tmp_path / "head" / "head.pid").read_text())
        assert len(_session(pid)) > 2  # ray start, GCS, raylet, dashboard...
        url = f"http://127.0.0.1:{ports['RAY_DASHBOARD_PORT']}/api/jobs/"
        assert _http_status(url) == 401
        assert _http_status(url, "not-the-token") in (401, 403)
        assert _http_status(url, token.read_text()) == 200
        assert _listening(ports["RAY_DASHBOARD_PORT"]) == ["127.0.0.1"]
    finally:
        stop = subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert pid is not None
    deadline = time.monotonic() + 30
    while _session(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _session(pid) == [], "processes of the head are left after stop"
    assert _listening(ports["RAY_DASHBOARD_PORT"]) == []
