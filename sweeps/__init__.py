"""Sweeps: declarative specs of many runs and their dispatch with Submitit.

- :mod:`g2po_bench.sweeps.spec`: YAML specs (``sweeps/specs/*.yaml``) -> validated runs
  (:func:`~g2po_bench.sweeps.spec.load_spec`, :func:`~g2po_bench.sweeps.spec.expand`).
- :mod:`g2po_bench.sweeps.launcher`: launch (one job array per resource shape), status, cancel, wait;
  the sweep state file and the launch lock.
- :mod:`g2po_bench.sweeps.job`: the submitted, checkpointable callable (claim, train with resume, release).
- :mod:`g2po_bench.sweeps.claims`: per-run claims, so that no configuration is trained twice at once.
- :mod:`g2po_bench.sweeps.scheduler`: is a job pending, running or over (squeue/sacct, /proc).
- :mod:`g2po_bench.sweeps.cli`: ``g2po sweep launch|status|cancel|list``.
- ``sweeps/slurm/start_cluster.sh`` / ``stop_cluster.sh``: a real single-node Slurm cluster
  for tests and CI (the tests' helpers are ``tests/sweep_support.py``).

See ``sweeps/README.md`` for the spec format, the commands and the design.
"""
