"""A rollout actor killed while it samples, whatever the machine's speed (for the actor-fault tests)."""

from __future__ import annotations

import os
import signal
import threading
import time


class KillWhileSampling:
    """Actor 1's handle, except that asking it for a fragment also starts a thread that SIGKILLs the
    actor's process 50 ms later, once it has checked that the fragment is not done yet (so the kill
    lands while the actor samples it, whatever the machine's speed)."""

    def __init__(self, handle, killed: list):
        self._handle, self._killed = handle, killed

    def __getattr__(self, name):
        return getattr(self._handle, name)

    @property
    def sample(self):
        import ray

        handle, killed = self._handle, self._killed

        class Method:
            @staticmethod
            def remote(*args):
                pid = ray.get(handle.pid.remote())
                ref = handle.sample.remote(*args)

                def kill():
                    time.sleep(0.05)
                    ready, _ = ray.wait([ref], timeout=0)
                    killed.append((pid, bool(ready)))
                    os.kill(pid, signal.SIGKILL)

                threading.Thread(target=kill, daemon=True).start()
                return ref

        return Method
