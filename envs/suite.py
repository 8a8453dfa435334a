"""Where an env's scenarios come from, how it samples them, and how it stops sampling broken ones.

A :class:`ScenarioPool` holds a suite's scenarios and the per-scenario tables
(:class:`envs.scenario_data.ScenarioData`, built on first use and cached). Sub-envs of a vector env
share one pool, so each scenario's tables are built once per process. A scenario whose reset or step
raises is charged a failure; after ``quarantine_after`` failures it is quarantined: logged, listed in
``pool.quarantined`` and never sampled again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from envs.config import EnvConfig
from envs.scenario_data import ScenarioCache, ScenarioData
from scenarios.builtin import load_suite
from scenarios.format import Scenario
from scenarios.io import ScenarioError, load

log = logging.getLogger("envs")


def resolve_scenarios(source, skip_broken: bool = False) -> list:
    """Scenarios from a built-in suite name, a suite folder, a scenario file, a Scenario, or a
    sequence of those. A broken file raises a ValueError naming it (``scenarios.ScenarioError``);
    with ``skip_broken=True`` it is logged and left out."""
    if isinstance(source, Scenario):
        return [source]
    if isinstance(source, str | os.PathLike):
        p = Path(source)
        if p.is_file():
            return [load(p)]
        return load_suite(source, skip_broken=skip_broken)
    if isinstance(source, Sequence):
        out, broken = [], []
        for item in source:
            try:
                out.extend(resolve_scenarios(item, skip_broken))
            except ScenarioError as e:
                if not skip_broken:
                    raise
                broken.append(str(e))
        for msg in broken:
            log.warning("skipping broken scenario: %s", msg)
        return out
    raise TypeError(
        f"scenarios: expected a suite name, a folder, a scenario file, a Scenario or a list of them; "
        f"got {type(source).__name__}"
    )


class ScenarioPool:
    """A suite's scenarios, their cached tables, failure counts and quarantine."""

    def __init__(self, scenarios: Sequence, config: EnvConfig):
        self.config = config
        self.scenarios = list(scenarios)
        if not self.scenarios:
            raise ValueError("ScenarioPool: no scenarios (the suite is empty, or every file was broken)")
        ids = [str(s.id) for s in self.scenarios]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"ScenarioPool: scenario ids must be unique, repeated: {', '.join(dup)}")
        self._index = {i: k for k, i in enumerate(ids)}
        self.ids = tuple(ids)
        self.failures = np.zeros(len(ids), dtype=np.int64)
        self.errors: dict[str, list[str]] = {}
        self._quarantined: list[str] = []
        self._spec = config.action_spec
        self._cache = ScenarioCache(
            lambda sc: ScenarioData(sc, config.horizon, self._spec, config.map_spacing), config.cache_size
        )

    def __len__(self) -> int:
        return len(self.scenarios)

    @property
    def quarantined(self) -> list[str]:
        """Ids of the scenarios no longer sampled, in the order they were quarantined."""
        return list(self._quarantined)

    def index_of(self, key) -> int:
        """A scenario's index from its id (str) or index (int)."""
        if isinstance(key, str):
            if key not in self._index:
                raise ValueError(f"unknown scenario {key!r}; the pool has {len(self)} (e.g. {', '.join(self.ids[:5])})")
            return self._index[key]
        k = int(key)
        if not 0 <= k < len(self):
            raise ValueError(f"scenario index {k} out of range [0, {len(self)})")
        return k

    def sample(self, rng: np.random.Generator) -> int:
        """A uniformly drawn index among the scenarios not quarantined."""
        ok = np.flatnonzero(~np.isin(np.arange(len(self)), [self._index[q] for q in self._quarantined]))
        if len(ok) == 0:
            raise RuntimeError(
                f"every scenario of the pool is quarantined ({len(self)}): "
                + "; ".join(f"{i}: {self.errors.get(i, ['?'])[-1]}" for i in self.ids[:5])
            )
        return int(ok[rng.integers(len(ok))])

    def data(self, k: int) -> ScenarioData:
        return self._cache.get(self.ids[k], self.scenarios[k])

    def record_failure(self, k: int, error: BaseException) -> str:
        """Charge scenario k with a failure; quarantine it at ``quarantine_after``. Returns the
        message (scenario id, file, exception) that goes into ``info["error"]``."""
        sid = self.ids[k]
        path = getattr(self.scenarios[k], "path", None)
        msg = f"scenario {sid!r}" + (f" ({path})" if path else "") + f": {type(error).__name__}: {error}"
        self.failures[k] += 1
        self.errors.setdefault(sid, []).append(msg)
        self._cache.drop(sid)
        log.warning("env failure %d/%d: %s", self.failures[k], self.config.quarantine_after, msg)
        if self.failures[k] >= self.config.quarantine_after and sid not in self._quarantined:
            self._quarantined.append(sid)
            log.error("quarantined %s after %d failures; it is no longer sampled", sid, self.failures[k])
        return msg

    def rig_spec(self) -> tuple[str, int, int]:
        """(rig name, width, height) for the env: the config's where set, else the scenarios' own,
        which must then agree (one observation space for the whole suite)."""
        cfg = self.config
        found = {(s.rig.name, s.rig.width, s.rig.height) for s in self.scenarios}
        name = cfg.rig
        if name is None:
            names = sorted({f[0] for f in found})
            if len(names) > 1:
                raise ValueError(f"scenarios use different camera rigs {names}; set config 'rig' to choose one")
            name = names[0]
        if cfg.resolution is not None:
            w, h = cfg.resolution
        else:
            sizes = sorted({f[1:] for f in found})
            if len(sizes) > 1:
                raise ValueError(
                    f"scenarios use different camera resolutions {sizes}; set config 'resolution' to choose one"
                )
            w, h = sizes[0]
        return name, int(w), int(h)
