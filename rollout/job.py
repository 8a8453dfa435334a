"""The Ray job this process runs in, if any, and the paths whose contents would not outlive it.

``ray job submit --working-dir . -- python -m ...`` unpacks the working directory into
``<ray temp>/session_*/runtime_resources/working_dir_files/_ray_pkg_<hash>/`` on the node that runs the
entrypoint and starts it there; Ray deletes that folder with the session or once no job uses the
package. A relative path inside a job therefore lands in a temporary copy on a cluster node, out of
reach of the machine that submitted the job. The tools refuse such paths at start
(:func:`check_job_path`) and say what to give instead.

A job is recognised by what Ray gives its entrypoint: ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (the job's
runtime env and metadata, with ``job_submission_id``), set by the job supervisor for the entrypoint
only (a plain driver has a Ray job id too, but not this); and, for a task or actor with a working
dir, a current folder under ``runtime_resources/working_dir_files/``. Nothing here imports Ray.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from sim.configs import ConfigError

JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted entrypoint
PACKAGES_DIR = "working_dir_files"  # <ray temp>/session_*/runtime_resources/working_dir_files/<package>/


@dataclass(frozen=True)
class RayJob:
    """A submitted Ray job: its submission id ('' if Ray gave none) and the unpacked working dir
    this process runs in (None for a job without ``--working-dir``)."""

    submission_id: str
    package: Path | None


def ray_job(environ: dict[str, str] | None = None, cwd: Path | None = None) -> RayJob | None:
    """The Ray job this process runs in, or None (a plain driver, a local run, a test)."""
    env = os.environ if environ is None else environ
    here = Path.cwd() if cwd is None else cwd
    package = next((p for p in (here, *here.parents) if p.parent.name == PACKAGES_DIR), None)
    config = env.get(JOB_CONFIG_VAR)
    if config is None and package is None:
        return None
    submission = ""
    try:
        meta = (json.loads(config) if config else {}).get("metadata") or {}
        submission = str(meta.get("job_submission_id") or meta.get("job_name") or "")
    except (ValueError, AttributeError):  # another Ray's layout: still a job
        pass
    return RayJob(submission, package)


def is_ephemeral(path: str, job: RayJob | None) -> bool:
    """True when ``path`` (a local path, not a URI) would be written where ``job`` does not keep it: a
    relative path, or one inside the job's unpacked working dir."""
    if job is None or "://" in path:
        return False
    p = Path(path).expanduser()
    if not p.is_absolute():
        return True
    if job.package is None:
        return False
    try:
        p.resolve().relative_to(job.package.resolve())
        return True
    except ValueError:
        return False


def check_job_path(path: str, what: str, instead: str, job: RayJob | None = None) -> None:
    """Refuse ``path`` (the setting ``what``) inside a Ray job when what is written there would vanish
    with the job (:func:`is_ephemeral`): ConfigError naming the setting, the path, where it would land
    and ``instead`` (what to give). Outside a job, any path is fine. ``job``: :func:`ray_job` by default."""
    job = ray_job() if job is None else job
    if not is_ephemeral(path, job):
        return
    assert job is not None
    where = f"the job's unpacked working dir {job.package}" if job.package else "the job's working folder on a node"
    name = f" {job.submission_id}" if job.submission_id else ""
    raise ConfigError(
        f"{what}={path!r}: this process runs inside Ray job{name}, where this path lands in {where}, a temporary "
        f"copy that Ray deletes and that the machine which submitted the job never sees. {instead}"
    )
