"""policy: the actor-critic network, export of trained policies, and loading of exported ones.

Importing ``policy`` (or ``policy.exported``) loads nothing heavy: ``load_exported`` and
``ExportedPolicy`` (numpy + onnxruntime or torch.export, no training code) and
``resolve_policy_source`` (training side: checkpoints and packages) are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policy.exported import ExportedPolicy, load_exported
    from policy.sources import PolicySource, resolve_policy_source

__all__ = ["ExportedPolicy", "PolicySource", "load_exported", "resolve_policy_source"]

_LAZY = {
    "ExportedPolicy": "policy.exported",
    "load_exported": "policy.exported",
    "PolicySource": "policy.sources",
    "resolve_policy_source": "policy.sources",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'policy' has no attribute {name!r}")
