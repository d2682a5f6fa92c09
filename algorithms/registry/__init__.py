"""The advantage-estimator registry (modelled on verl's ``register_adv_est``).

An advantage estimator is a pure, vectorized function of a :class:`~g2po_bench.core.batch.StepBatch`
that returns one scalar advantage per step row (docs/design-notes.md "Data flow"). Its
registration
carries everything the rest of the suite needs, so adding an estimator is one new file
(``docs/extending.md``):

- its options, their defaults, choices and checks (config validation, ``g2po algorithms``);
- its display ``label`` and which options make a table *variant* (``g2po report``,
  :mod:`g2po_bench.analysis.naming`);
- its state-key rule (``env.state_key=auto``);
- the extra per-row **inputs** it needs beyond the StepBatch, named from the fixed vocabulary
  :data:`INPUTS` (critic ``values``, sampler ``entropies``, ``state_texts``, ``action_texts``,
  ``next_state_key``);
  both trainers and every other tool build them with :func:`rollout_inputs`, with no
  estimator-specific code, and a trainer trains a critic when ``values`` is declared;
- optionally a slow per-row ``oracle`` (tests and ``g2po bench advantages``).

Modules, by role
---------------
This package is the public face: every name below is importable from
``g2po_bench.algorithms.registry``. Behind it:

- :mod:`~g2po_bench.algorithms.registry.spec`: what an estimator is and the checks of its options
  (:class:`EstimatorSpec`, :data:`INPUTS`, :data:`COMMON_OPTIONS`, :func:`register_estimator`).
- :mod:`~g2po_bench.algorithms.registry.discovery`: finding the estimators and looking them up by
  name. Nothing lists them: on first use the registry imports every module of the subpackage
  :mod:`g2po_bench.algorithms.estimators` (``pkgutil``; one module per estimator), then every
  entry point of the group ``g2po.estimators`` (``importlib.metadata``; how an installed package
  adds estimators), and a run config can name one more module with ``algorithm.module=pkg.module``
  (:func:`import_estimator_module`, called before validation). Importing a module is what
  registers its estimators.
- :mod:`~g2po_bench.algorithms.registry.estimation`: running one (inputs, options and result
  checked), its oracle, and the trial run on a synthetic batch.

Public API
----------
- :func:`register_estimator` -- decorator that registers ``fn(batch, **options, **inputs)``.
- :func:`available_estimators`, :func:`estimator_spec`, :func:`estimator_defaults` (the default
  option values of an estimator, with an environment's where it declares some).
- :func:`estimator_inputs` -- the inputs an estimator needs with given options.
- :func:`rollout_inputs` -- the inputs dict from a RolloutBatch (+ critic values).
- :func:`check_options` -- validate an options dict (unknown name, wrong type, bad choice).
- :func:`bind_estimator` -- look an estimator up and check its options once; the
  :class:`BoundEstimator` it returns is what a trainer calls every iteration
  (``estimator(rollouts, values) -> AdvantageResult``; inputs and result still checked per call).
- :func:`run_estimator_options`, :func:`bind_run_estimator` -- the options a run config passes
  to its estimator, and its estimator bound to them (the config load and the trainers).
- :func:`estimate` -- run an estimator; returns :class:`AdvantageResult`.
- :func:`oracle_estimate` -- run its per-row oracle (where one is registered).
- :func:`trial_estimate` -- run it once on a small synthetic batch (the config load's check).
- :func:`compute_advantages` -- ``estimate(...).advantages``.
- :func:`describe_estimators` -- a text listing (what ``g2po algorithms`` prints).

Common options
--------------
Every estimator accepts the five options the trainer always passes (the reference values are the
defaults: verl-agent's ``examples/gigpo_trainer/run_alfworld.sh`` and the papers' success reward of
10; docs/design-notes.md "Training-loop facts"): ``mode`` ("mean_std_norm" | "mean_norm"),
``gamma`` (0.95), ``step_weight`` (1.0; G2PO's w, GiGPO's omega), ``invalid_penalty`` (0.1) and
``success_reward`` (10.0). An estimator that does not use one of them simply ignores it (its
function is called only with the options its signature names). Any other option name must be
declared by the estimator, else :func:`check_options` raises.

A minimal estimator (a module of ``algorithms/estimators/``, or of any package)::

    import numpy as np
    from g2po_bench.algorithms.registry import AdvantageResult, register_estimator

    @register_estimator(
        "reinforce",                              # the name used in configs: algorithm.name
        options={"baseline": 0.0},                # extra options and their defaults
        label="REINFORCE",                        # the row name in g2po report
        description="A = R_tau - baseline, broadcast to every step",
    )
    def reinforce(batch, *, baseline, invalid_penalty):
        # common options (mode, gamma, ...) are passed only if the signature names them
        _, tid = np.unique(batch.traj_id, return_inverse=True)
        episode_return = np.bincount(tid, weights=batch.reward)[tid]
        adv = episode_return - baseline - invalid_penalty * (~batch.action_valid)
        return AdvantageResult(advantages=adv.astype(np.float64))

Option values are type-checked against the defaults (a float option accepts ints, a bool
option only bools, a str option only strs; ``types={"name": (int, str)}`` overrides that; an
option whose default is None accepts anything and is checked by the estimator). Pass
``choices={"name": (...)}`` for a closed set of values and ``validators={"name": fn}``
(``fn(value) -> str | None``, the string being the error) for ranges, and ``check=fn``
(``fn(all_options: dict) -> str | None``) for rules that involve several options.
"""


from g2po_bench.algorithms.registry.discovery import (
    ENTRY_POINT_GROUP,
    ESTIMATOR_PACKAGE,
    available_estimators,
    check_options,
    describe_estimators,
    discover_estimators,
    estimator_defaults,
    estimator_inputs,
    estimator_spec,
    import_estimator_module,
)
from g2po_bench.algorithms.registry.estimation import (
    BoundEstimator,
    bind_estimator,
    bind_run_estimator,
    check_inputs,
    compute_advantages,
    estimate,
    oracle_estimate,
    rollout_inputs,
    run_estimator_options,
    trial_estimate,
)
from g2po_bench.algorithms.registry.spec import (
    COMMON_OPTIONS,
    INPUTS,
    AdvantageResult,
    EstimatorInput,
    EstimatorSpec,
    in_range,
    register_estimator,
)

__all__ = [
    "AdvantageResult",
    "EstimatorSpec",
    "EstimatorInput",
    "COMMON_OPTIONS",
    "INPUTS",
    "ENTRY_POINT_GROUP",
    "ESTIMATOR_PACKAGE",
    "register_estimator",
    "discover_estimators",
    "import_estimator_module",
    "available_estimators",
    "estimator_defaults",
    "BoundEstimator",
    "bind_estimator",
    "run_estimator_options",
    "bind_run_estimator",
    "estimator_spec",
    "estimator_inputs",
    "rollout_inputs",
    "check_options",
    "check_inputs",
    "estimate",
    "oracle_estimate",
    "trial_estimate",
    "compute_advantages",
    "describe_estimators",
    "in_range",
]
