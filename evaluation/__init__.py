"""Evaluation: closed-loop rollouts of policies and baselines on scenario suites, RAD's metrics, reports.

The layer above ``rollout``, whose runner drives the clips (``rollout.group.RolloutGroup.run_episodes``, in
this process or on Ray actors): evaluation holds no env loop and no Ray actor of its own.
``python -m evaluation`` (also ``python -m evaluation.evaluate``) runs ``evaluation.evaluate.run``;
``evaluation.policies`` resolves and checks the policies to drive, ``evaluation.metrics``
turns per-clip records into RAD's metrics, ``evaluation.report`` writes tables, plots and videos,
``evaluation.baselines`` holds the built-in drivers. This file imports only the pure parts, so that
``python -m evaluation.evaluate`` does not find its own module already imported.
"""

from evaluation.baselines import BASELINES
from evaluation.metrics import EVENTS, METRICS, by_kind, rad_metrics

__all__ = ["BASELINES", "EVENTS", "METRICS", "by_kind", "rad_metrics"]
