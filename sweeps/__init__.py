"""Sweeps: declarative specs of many runs and their dispatch with Submitit.

- :mod:`sweeps.spec`: YAML specs (``sweeps/specs/*.yaml``) -> validated runs
  (:func:`~sweeps.spec.load_spec`, :func:`~sweeps.spec.expand`).
- :mod:`sweeps.launcher`: launch (one job array per resource shape), status, cancel, wait;
  the sweep state file and the launch lock.
- :mod:`sweeps.job`: the submitted, checkpointable callable (claim, train with resume, release).
- :mod:`sweeps.claims`: per-run claims, so that no configuration is trained twice at once.
- :mod:`sweeps.scheduler`: is a job pending, running or over (squeue/sacct, /proc).
- :mod:`sweeps.cli`: ``g2po sweep launch|status|cancel|list``.
- ``sweeps/slurm/start_cluster.sh`` / ``stop_cluster.sh``: a real single-node Slurm cluster
  for tests and CI. :mod:`sweeps.testing`: helpers for the tests.

See ``sweeps/README.md`` for the spec format, the commands and the design.
"""
