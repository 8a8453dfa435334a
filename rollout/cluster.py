"""Joining Ray: the one place a driver (training, evaluation) connects or starts a local instance;
and what an actor reports about itself (its render backend, its node) for a run's provenance.

``ray`` is imported inside the functions: it is heavy, and the serial mode runs without it.
"""

from __future__ import annotations

import os
from typing import Any

from sim.rendering import backend_report


def connect(address: str = "", num_cpus: int = 0, log_to_driver: bool = True) -> bool:
    """Join ``address`` (or ``RAY_ADDRESS``, which ``ray job submit`` sets), else start a local Ray
    without the dashboard (it runs code for whoever reaches it). Returns True when this call started
    or joined Ray, so the caller knows to shut it down; False if Ray was already initialised."""
    import ray  # heavy optional dependency (see the module docstring)

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or ""
    kwargs: dict[str, Any] = dict(log_to_driver=log_to_driver, configure_logging=False)
    if address:
        ray.init(address=address, **kwargs)
        return True
    if num_cpus:
        kwargs["num_cpus"] = num_cpus
    ray.init(include_dashboard=False, **kwargs)
    return True


def actor_render_report(actor, requested: str) -> dict[str, Any]:
    """Run inside an actor (``handle.__ray_call__.remote(actor_render_report, backend)``): what
    ``sim.render`` with ``requested`` uses in that process (``sim.rendering.backend_report``: its own
    CUDA, its own gsplat), and where the process runs (Ray node id, address, pid)."""
    import ray  # heavy optional dependency (see the module docstring)

    return dict(
        backend_report(requested),
        node_id=ray.get_runtime_context().get_node_id(),
        ip=ray.util.get_node_ip_address(),
        pid=os.getpid(),
    )
