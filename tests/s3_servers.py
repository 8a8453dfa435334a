"""Real S3 endpoints on loopback for tests: moto's server and OpenStack Swift with its s3api.

Fixtures (import them into a test module, or into conftest.py):
- ``moto_s3``: session-scoped; ``.venv/bin/moto_server`` on a free 127.0.0.1 port with one bucket.
- ``swift_s3``: session-scoped; a one-replica Swift (proxy, account, container and object servers,
  all on free 127.0.0.1 ports), following ``shared/tools/s3-loopback``. ``swift==2.38.3`` is
  installed into ``<repo>/.cache/swift-venv`` on first use (about 30 s, from the package index).

An endpoint that cannot be had (moto_server not installed, Swift not installable, no extended
attributes) skips its tests with the reason on a developer's machine, and is a test error with the
reason where ``CI`` is set (CI runs with ``CI=true``): there the S3 tests must run, not vanish.

Both yield an :class:`S3Server`; :class:`MotoServer` can also be made directly by a test that
stops and restarts its own server (outage tests). Servers are stopped by their PIDs, never by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

import pytest

REPO = Path(__file__).resolve().parent.parent
SWIFT_VERSION = "2.38.3"
SWIFT_VENV = REPO / ".cache" / "swift-venv"

__all__ = [
    "REPO",
    "MotoServer",
    "S3Server",
    "SwiftServer",
    "endpoint_unavailable",
    "ensure_swift_venv",
    "free_port",
    "in_ci",
    "moto_s3",
    "swift_s3",
]


def in_ci() -> bool:
    """True where ``CI`` is set to anything but empty, 0 or false (CI runs with ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def endpoint_unavailable(reason: str) -> NoReturn:
    """An S3 endpoint cannot be had: a test error in CI (the S3 tests must run there), else a skip."""
    if in_ci():
        pytest.fail(f"CI is set, so this is an error, not a skip: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_pid(proc: subprocess.Popen, grace: float = 5.0, kill: bool = False) -> None:
    """Stop one process we started, by its PID: SIGTERM (SIGKILL if ``kill``), SIGKILL after ``grace`` s."""
    if proc.poll() is not None:
        return
    if kill:
        proc.kill()
    else:
        proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)


class S3Server:
    """An S3 endpoint on 127.0.0.1:``port`` with ``bucket`` created; subclasses start and stop it."""

    def __init__(self, name: str, port: int, bucket: str, access_key: str, secret_key: str, log_dir: Path):
        self.name, self.port, self.bucket = name, port, bucket
        self.access_key, self.secret_key = access_key, secret_key
        self.region = "us-east-1"
        self.log_dir = log_dir

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.endpoint}"

    def uri(self, prefix: str = "", *, credentials: bool = True) -> str:
        """``s3://bucket/prefix?endpoint_override=...`` (credentials in the query unless told not to)."""
        query = f"endpoint_override={self.endpoint}&scheme=http&region={self.region}"
        if credentials:
            query += f"&access_key={quote(self.access_key, safe='')}&secret_key={quote(self.secret_key, safe='')}"
        return f"s3://{self.bucket}/{prefix}?{query}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def client(self):
        """A boto3 client for this server (made once: making one takes about a second)."""
        if getattr(self, "_client", None) is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self):
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def create_bucket(self, timeout: float = 30.0) -> None:
        """Create the bucket (idempotent), retrying while the server warms up."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client().create_bucket(Bucket=self.bucket)
                return
            except Exception as exc:
                code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
                if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name}: could not create bucket {self.bucket}: {exc}") from exc
                time.sleep(0.1)

    def _wait_port(self, port: int, procs: list[subprocess.Popen], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{self.name}: a server exited with code {p.returncode}; logs in {self.log_dir}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
            time.sleep(0.05)
        raise RuntimeError(
            f"{self.name}: nothing listens on 127.0.0.1:{port} after {timeout} s; logs in {self.log_dir}"
        )

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class MotoServer(S3Server):
    """``moto_server -H 127.0.0.1 -p PORT`` as a subprocess. State is in memory: a restart empties it."""

    def __init__(self, log_dir: Path, port: int | None = None, bucket: str = "splatdrive-test"):
        super().__init__("moto", port or free_port(), bucket, "testing", "testing", log_dir)
        self.proc: subprocess.Popen | None = None
        exe = Path(sys.executable).parent / "moto_server"  # the venv's, without resolving its python link
        self.exe = str(exe) if exe.exists() else shutil.which("moto_server")

    def start(self) -> None:
        if self.exe is None:
            endpoint_unavailable("moto_server is not installed (pip install 'moto[server]', part of the dev extra)")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"moto-{self.port}.log", "ab")
        self.proc = subprocess.Popen(
            [self.exe, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self._wait_port(self.port, [self.proc], timeout=30.0)
        self.create_bucket()

    def stop(self) -> None:
        """Kill the server (SIGKILL by PID: an outage, and moto has nothing on disk to flush)."""
        if self.proc is not None:
            _stop_pid(self.proc, kill=True)
            self.proc = None


class SwiftServer(S3Server):
    """Single-replica OpenStack Swift with s3api on 127.0.0.1: the proxy and the three storage servers,
    each on its own port (all configurable), configured like shared/tools/s3-loopback/swift_setup.sh."""

    SERVERS = ("account", "container", "object")

    def __init__(
        self, base: Path, venv: Path = SWIFT_VENV, proxy_port: int | None = None, bucket: str = "splatdrive-test"
    ):
        super().__init__("swift", proxy_port or free_port(), bucket, "test:tester", "testing", base / "log")
        self.base, self.venv = base, venv
        self.ports = {name: free_port() for name in self.SERVERS}
        self.procs: dict[str, subprocess.Popen] = {}

    def configure(self) -> None:
        b, user = self.base, _user_name()
        for d in ("etc", "srv/node/d1", "run", "log"):
            (b / d).mkdir(parents=True, exist_ok=True)
        (b / "etc/swift.conf").write_text(
            "[swift-hash]\nswift_hash_path_suffix = test_suffix\nswift_hash_path_prefix = test_prefix\n"
            "[storage-policy:0]\nname = gold\ndefault = yes\n"
        )
        builder = str(self.venv / "bin" / "swift-ring-builder")
        for name, port in self.ports.items():
            (b / f"etc/{name}-server.conf").write_text(
                f"[DEFAULT]\ndevices = {b}/srv/node\nmount_check = false\ndisable_fallocate = true\n"
                f"bind_ip = 127.0.0.1\nbind_port = {port}\nworkers = 0\nuser = {user}\nswift_dir = {b}/etc\n"
                f"[pipeline:main]\npipeline = {name}-server\n[app:{name}-server]\nuse = egg:swift#{name}\n"
            )
            ring = str(b / f"etc/{name}.builder")
            subprocess.run([builder, ring, "create", "8", "1", "1"], check=True, capture_output=True)
            subprocess.run([builder, ring, "add", f"r1z1-127.0.0.1:{port}/d1", "1"], check=True, capture_output=True)
            subprocess.run([builder, ring, "rebalance"], capture_output=True)  # exits 1 on "no partitions moved"
        filters = "".join(
            f"[filter:{f}]\nuse = egg:swift#{f}\n"
            for f in (
                "catch_errors",
                "gatekeeper",
                "healthcheck",
                "bulk",
                "copy",
                "slo",
                "dlo",
                "symlink",
                "listing_formats",
            )
        )
        (b / "etc/proxy-server.conf").write_text(
            f"[DEFAULT]\nbind_ip = 127.0.0.1\nbind_port = {self.port}\nworkers = 0\nuser = {user}\n"
            f"swift_dir = {b}/etc\n"
            "[pipeline:main]\npipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk "
            "s3api tempauth copy slo dlo versioned_writes symlink proxy-logging proxy-server\n"
            "[app:proxy-server]\nuse = egg:swift#proxy\nallow_account_management = true\naccount_autocreate = true\n"
            # One replica of each server: the proxy's error limiting (a node that failed 10 times is skipped for
            # 60 s) would turn a restart seen by retrying clients into a minute of 503s for everything.
            "error_suppression_interval = 1\n"
            "[filter:s3api]\nuse = egg:swift#s3api\nlocation = us-east-1\n"
            "[filter:tempauth]\nuse = egg:swift#tempauth\nuser_test_tester = testing .admin\n"
            + filters
            + "[filter:proxy-logging]\nuse = egg:swift#proxy_logging\n[filter:cache]\nuse = egg:swift#memcache\n"
            "[filter:versioned_writes]\nuse = egg:swift#versioned_writes\nallow_versioned_writes = true\n"
        )

    def start(self) -> None:
        # The storage servers first, the proxy once they listen: a proxy up before them answers the clients that
        # retry through a restart with errors, and error-limits the servers it could not reach.
        for group in (self.SERVERS, ("proxy",)):
            for name in group:
                log = open(self.log_dir / f"{name}.log", "ab")
                self.procs[name] = subprocess.Popen(
                    [str(self.venv / "bin" / f"swift-{name}-server"), str(self.base / f"etc/{name}-server.conf"), "-v"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
                log.close()
            procs = list(self.procs.values())
            for port in [self.ports[n] for n in group if n in self.ports] or [self.port]:
                self._wait_port(port, procs, timeout=60.0)
        deadline = time.monotonic() + 60.0
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/healthcheck", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"swift: /healthcheck never answered; logs in {self.log_dir}")
            time.sleep(0.05)
        self.create_bucket()

    def stop(self) -> None:
        for name in ("proxy", *self.SERVERS):
            proc = self.procs.pop(name, None)
            if proc is not None:
                _stop_pid(proc)


def _user_name() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def ensure_swift_venv(venv: Path = SWIFT_VENV) -> Path:
    """Install swift==2.38.3 into ``venv`` unless a finished install is there; returns ``venv``."""
    marker = venv / f".installed-swift-{SWIFT_VERSION}"
    if marker.exists():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test sessions at once: one installs, the other waits
        if not marker.exists():
            _install_swift(venv, marker)
    return venv


def _install_swift(venv: Path, marker: Path) -> None:
    if venv.exists():
        shutil.rmtree(venv)  # an interrupted install: the marker is written only once pip succeeded
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", f"swift=={SWIFT_VERSION}"],
            check=True,
            capture_output=True,
            timeout=900,
        )
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    marker.write_text(f"swift=={SWIFT_VERSION}\n")


def _has_xattrs(path: Path) -> bool:
    probe = path / ".xattr-probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.splatdrive", b"1")
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory):
    """moto's S3 server on a free loopback port, with bucket ``splatdrive-test``, for the session."""
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def swift_s3(tmp_path_factory):
    """A real OpenStack Swift (s3api) on free loopback ports, with bucket ``splatdrive-test``."""
    try:
        venv = ensure_swift_venv()
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        endpoint_unavailable(f"could not install swift=={SWIFT_VERSION} into {SWIFT_VENV}: {exc} {detail[-500:]!r}")
    base = tmp_path_factory.mktemp("swift")
    if not _has_xattrs(base):
        endpoint_unavailable(f"Swift needs extended attributes; {base} has none")
    server = SwiftServer(base, venv)
    server.configure()
    try:
        server.start()
        yield server
    finally:
        server.stop()
