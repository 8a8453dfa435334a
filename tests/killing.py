"""A rollout actor killed while it works, whatever the machine's speed (for the actor-fault tests)."""

from __future__ import annotations

import os
import signal
import threading
import time


class KillWhileSampling:
    """Actor 1's handle, except that asking it for a fragment (``method``: ``sample``, or ``episodes`` for a
    chunk of evaluation episodes) also starts a thread that SIGKILLs the actor's process 50 ms later, once it
    has checked that the work is not done yet (so the kill lands while the actor works, whatever the
    machine's speed). The group replaces the dead actor's handle, and with it this wrapper."""

    def __init__(self, handle, killed: list, method: str = "sample"):
        self._handle, self._killed, self._method = handle, killed, method

    def __getattr__(self, name):
        if name == self._method:
            return self._killing()
        return getattr(self._handle, name)

    def _killing(self):
        import ray

        handle, killed, method = self._handle, self._killed, self._method

        class Method:
            @staticmethod
            def remote(*args):
                pid = ray.get(handle.pid.remote())
                ref = getattr(handle, method).remote(*args)

                def kill():
                    time.sleep(0.05)
                    ready, _ = ray.wait([ref], timeout=0)
                    killed.append((pid, bool(ready)))
                    os.kill(pid, signal.SIGKILL)

                threading.Thread(target=kill, daemon=True).start()
                return ref

        return Method
