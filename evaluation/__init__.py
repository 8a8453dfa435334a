"""Evaluation: closed-loop rollouts of policies and baselines on scenario suites, RAD's metrics, reports.

The layer above ``rollout``. ``python -m evaluation`` (also ``python -m evaluation.evaluate``, and
``python -m scenarios.evaluate``, kept as an alias) runs ``evaluation.evaluate.run``;
``evaluation.rollouts`` drives the clips (in this process or on Ray actors), ``evaluation.metrics``
turns per-clip records into RAD's metrics, ``evaluation.report`` writes tables, plots and videos,
``evaluation.baselines`` holds the built-in drivers. This file imports only the pure parts, so that
``python -m evaluation.evaluate`` does not find its own module already imported.
"""

from evaluation.baselines import BASELINES
from evaluation.metrics import EVENTS, METRICS, by_kind, rad_metrics

__all__ = ["BASELINES", "EVENTS", "METRICS", "by_kind", "rad_metrics"]
