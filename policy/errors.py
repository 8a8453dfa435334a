"""The error of policy sources (``policy.sources`` and the modules it reads with)."""


class PolicySourceError(ValueError):
    """A policy source that cannot be used: missing, corrupt, or not what it claims to be."""
