"""Joining Ray: the one place a driver (training, evaluation) connects or starts a local instance."""

from __future__ import annotations

import os
from typing import Any


def connect(address: str = "", num_cpus: int = 0, log_to_driver: bool = True) -> bool:
    """Join ``address`` (or ``RAY_ADDRESS``, which ``ray job submit`` sets), else start a local Ray
    without the dashboard (it runs code for whoever reaches it). Returns True when this call started
    or joined Ray, so the caller knows to shut it down; False if Ray was already initialised."""
    import ray

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
