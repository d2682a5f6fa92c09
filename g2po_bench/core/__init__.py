"""The ground floor of the suite: what every other layer may import, and which imports none of them.

- :mod:`~g2po_bench.core.config`: the run config schema (typed dataclasses) and its loading.
- :mod:`~g2po_bench.core.batch`: the :class:`StepBatch` (one row per agent step), the input of
  every advantage estimator and the output of the rollout engine.
- :mod:`~g2po_bench.core.protocol`: the environment protocol (Task, Observation, Environment).
- :mod:`~g2po_bench.core.rundir`, :mod:`~g2po_bench.core.steptable`,
  :mod:`~g2po_bench.core.crashes`: the run folder and its records.
- :mod:`~g2po_bench.core.stats`: bootstrap confidence intervals.
- :mod:`~g2po_bench.core.seeding`: per-sample seeds (counter-based random numbers that do not
  depend on how a batch is cut).
- :mod:`~g2po_bench.core.arguments`: value types of command-line options (whole numbers >= 1, >= 0).
"""
