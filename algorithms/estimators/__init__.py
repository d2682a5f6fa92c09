"""The built-in advantage estimators, one module per estimator.

Nothing imports these modules by name: :func:`g2po_bench.algorithms.registry.discover_estimators`
imports every module of this package (``pkgutil``) the first time the registry is asked for an
estimator, and importing a module registers its estimators. A new estimator is one new module
here (``docs/extending.md``); modules whose name starts with ``_`` are skipped.

Each module reads top to bottom: its equations and source in the docstring, its options, the
vectorized estimator, and where there is one its per-row oracle (the same equations written with
Python loops).
"""
