"""The estimator registry: names, options, validation, custom estimators (algorithms/registry/)."""

from __future__ import annotations

import numpy as np
import pytest

import g2po_bench.algorithms as algorithms
from g2po_bench.algorithms import registry
from g2po_bench.algorithms.registry import (
    COMMON_OPTIONS,
    AdvantageResult,
    available_estimators,
    check_options,
    compute_advantages,
    describe_estimators,
    estimate,
    estimator_defaults,
    register_estimator,
)
from g2po_bench.algorithms.synthetic import (
    batch_from_trajectories,
    reference_batch,
    synthetic_inputs,
)

# the estimators the suite ships (each in algorithms/estimators/<name>.py)
SHIPPED = ["crbc", "empg", "g2po", "gigpo", "graphgpo", "grpo", "hgpo", "ppo", "rloo"]


def in_tree_estimators() -> list[str]:
    """The estimators registered by modules of the estimators package (discovered, never listed in
    the code): the shipped ones and any module added there (docs/extending.md: no other edit)."""
    return sorted(n for n in available_estimators()
                  if registry.estimator_spec(n).module.startswith(registry.ESTIMATOR_PACKAGE + "."))


BUILTINS = in_tree_estimators()


def _inputs(name, b, seed=0):
    return synthetic_inputs(b, registry.estimator_inputs(name), np.random.default_rng(seed))


@pytest.fixture
def batch():
    return batch_from_trajectories(
        [{"keys": [0, 1], "success": True}, {"keys": [0, 2, 3], "success": False, "invalid": [1]}]
    )


def test_builtins_registered_and_reexported():
    """Every module file of the estimators package registers estimators (discovery misses none), the
    shipped ones among them; nothing here lists the package's modules, so a new module needs no edit."""
    import pkgutil

    import g2po_bench.algorithms.estimators as package

    assert set(SHIPPED) <= set(in_tree_estimators())
    files = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert {registry.estimator_spec(n).module.rsplit(".", 1)[1] for n in in_tree_estimators()} == files
    assert set(SHIPPED) <= files
    for name in ("compute_advantages", "estimate", "register_estimator", "available_estimators",
                 "StepBatch"):
        assert hasattr(algorithms, name)


def test_defaults():
    assert estimator_defaults("g2po") == {
        **COMMON_OPTIONS,
        "aggregation": True,
        "graph_scope": "group",
        "edge_norm_scope": "group",
        "components": "full",
        "node_reference_set": "visits",
        "episode_stat": "steps",
        "eps": 1e-6,
    }
    assert COMMON_OPTIONS == {"mode": "mean_std_norm", "gamma": 0.95, "step_weight": 1.0,
                              "invalid_penalty": 0.1, "success_reward": 10.0}
    assert estimator_defaults("gigpo")["grouping"] == "exact"
    assert estimator_defaults("gigpo")["similarity_threshold"] == 0.95
    assert estimator_defaults("ppo")["convention"] == "reference"
    assert estimator_defaults("ppo")["lam"] == 0.95 and estimator_defaults("ppo")["whiten"] is False
    assert estimator_defaults("rloo")["episode_stat"] == "trajectories"
    assert estimator_defaults("grpo")["episode_stat"] == "steps"


def test_common_options_accepted_by_every_estimator(batch):
    common = {"mode": "mean_norm", "gamma": 0.9, "step_weight": 0.5, "invalid_penalty": 0.2,
              "success_reward": 5.0}
    for name in BUILTINS:
        check_options(name, common)
        res = estimate(name, batch, inputs=_inputs(name, batch), **common)
        assert res.advantages.shape == (len(batch),) and res.advantages.dtype == np.float64
        assert {"adv_mean", "adv_std"} <= set(res.diagnostics)
        assert all(isinstance(v, float) for v in res.diagnostics.values())


@pytest.mark.parametrize(
    "name, options, match",
    [
        ("g2po", {"foo": 1}, "unknown option 'foo'.*known options: aggregation"),
        ("grpo", {"omega": 1.0}, "unknown option 'omega'"),
        ("grpo", {"mode": "z_score"}, "mode.*mean_std_norm, mean_norm"),
        ("g2po", {"graph_scope": "world"}, "graph_scope.*group, batch"),
        ("g2po", {"edge_norm_scope": "task"}, "edge_norm_scope"),
        ("g2po", {"components": "ep+ec"}, "components"),
        ("g2po", {"node_reference_set": "edges"}, "node_reference_set"),
        ("g2po", {"aggregation": "yes"}, "must be a bool"),
        ("g2po", {"gamma": "0.9"}, "must be a number"),
        ("g2po", {"gamma": True}, "must be a number"),
        ("g2po", {"gamma": 1.5}, "gamma.*<= 1"),
        ("g2po", {"step_weight": float("nan")}, "finite"),
        ("g2po", {"invalid_penalty": -0.1}, ">= 0"),
        ("g2po", {"eps": 0.0}, "eps.*> 0"),
        ("g2po", {"components": "ep+nc+agg", "aggregation": False}, "contradicts"),
        ("gigpo", {"grouping": "fuzzy"}, "grouping"),
        ("gigpo", {"similarity_threshold": 0.0}, "similarity_threshold"),
        ("ppo", {"convention": "gae"}, "convention"),
        ("ppo", {"lam": 2.0}, "lam"),
        ("rloo", {"episode_stat": "tokens"}, "episode_stat"),
    ],
)
def test_check_options_errors(name, options, match):
    with pytest.raises(ValueError, match=match):
        check_options(name, options)


def test_valid_ablation_options_pass():
    check_options("g2po", {"aggregation": False, "graph_scope": "batch", "edge_norm_scope": "node",
                           "components": "ep+nc", "node_reference_set": "successors",
                           "episode_stat": "trajectories", "step_weight": 0.8, "gamma": 1})
    check_options("gigpo", {"grouping": "similarity", "similarity_threshold": 0.9})
    check_options("ppo", {"convention": "turn_gae", "lam": 1.0, "whiten": True})


def test_unknown_estimator():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppg'.*g2po"):
        estimate("ppg", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="registered estimators"):
        estimator_defaults("ppg")


def test_estimate_needs_a_step_batch():
    with pytest.raises(TypeError, match="StepBatch"):
        estimate("grpo", {"reward": [1.0]})  # type: ignore[arg-type]


def test_compute_advantages_matches_estimate(batch):
    np.testing.assert_array_equal(compute_advantages("g2po", batch), estimate("g2po", batch).advantages)


def test_register_custom_estimator(batch):
    name = "test_reinforce"
    try:
        @register_estimator(name, options={"baseline": 0.0}, description="A = R - b")
        def reinforce(b, *, baseline, invalid_penalty):
            _, tid = np.unique(b.traj_id, return_inverse=True)
            ret = np.bincount(tid, weights=b.reward)[tid]
            return AdvantageResult(ret - baseline - invalid_penalty * (~b.action_valid))

        assert name in available_estimators()
        assert estimator_defaults(name)["baseline"] == 0.0
        # R = 10, 10, 0, 0, 0; row 3 invalid
        np.testing.assert_allclose(
            compute_advantages(name, batch, baseline=1.0, mode="mean_norm"), [9, 9, -1, -1.1, -1]
        )
        assert f"{name}: A = R - b" in describe_estimators()
        with pytest.raises(ValueError, match="already registered"):
            register_estimator(name)(lambda b: AdvantageResult(np.zeros(len(b))))
    finally:
        registry.spec._REGISTRY.pop(name, None)


def test_register_rejects_options_the_function_lacks():
    with pytest.raises(TypeError, match="lacks"):
        register_estimator("test_bad", options={"k": 1})(lambda b, *, mode: None)
    assert "test_bad" not in available_estimators()


def test_bad_estimator_output_is_caught(batch):
    name = "test_broken"
    try:
        def broken(b, *, kind):
            if kind == "array":
                return np.zeros(len(b))
            if kind == "returns":
                return AdvantageResult(np.zeros(len(b)), returns=np.zeros(3))
            return AdvantageResult(np.zeros(1) if kind == "shape" else np.full(len(b), np.nan))

        register_estimator(name, options={"kind": "shape", "depth": 2})(lambda b, *, kind, depth: broken(b, kind=kind))
        with pytest.raises(ValueError, match=r"advantages of shape \(1,\), expected \(5,\)"):
            estimate(name, batch)
        with pytest.raises(ValueError, match="non-finite"):
            estimate(name, batch, kind="nan")
        with pytest.raises(TypeError, match="returned a ndarray; it must return AdvantageResult"):
            estimate(name, batch, kind="array")
        with pytest.raises(ValueError, match=r"returns of shape \(3,\), expected \(5,\)"):
            estimate(name, batch, kind="returns")
        # an int default takes whole numbers only
        with pytest.raises(ValueError, match="'depth'.*whole number.*got 2.5"):
            check_options(name, {"depth": 2.5})
        check_options(name, {"depth": 3})
    finally:
        registry.spec._REGISTRY.pop(name, None)


def test_describe_lists_every_option():
    text = describe_estimators()
    for name in BUILTINS:
        assert text.count(f"\n{name}: ") + text.startswith(f"{name}: ") == 1
        for opt in estimator_defaults(name):
            assert f"    {opt} = " in text


def test_config_validation_uses_the_registry():
    pytest.importorskip("omegaconf")
    from g2po_bench.core.config import ConfigError
    from g2po_bench.runconfig import load_config

    cfg = load_config(overrides=["algorithm.options.graph_scope=batch"])
    assert cfg.algorithm.options == {"graph_scope": "batch"}
    with pytest.raises(ConfigError, match="unknown option 'nope'"):
        load_config(overrides=["algorithm.options.nope=1"])
    with pytest.raises(ConfigError, match="components"):
        load_config(overrides=["algorithm.options.components=all"])


def test_a_bound_estimator_checks_its_options_once_and_its_inputs_on_every_call(batch, monkeypatch):
    """bind_estimator checks the options when it binds; a call of the bound estimator does not
    check them again (here any further check would raise), but it still checks the per-row inputs,
    and gives what estimate() gives."""
    from types import SimpleNamespace

    from g2po_bench.algorithms.registry import EstimatorSpec, bind_estimator

    with pytest.raises(ValueError, match="lam"):
        bind_estimator("ppo", {"lam": 2.0})
    bound = bind_estimator("ppo", {"lam": 0.9, "gamma": 0.5})
    assert bound.name == "ppo" and bound.inputs == ("values",) and bound.needs_critic
    assert bound.options == {"lam": 0.9, "gamma": 0.5}
    assert bound.arguments["lam"] == 0.9 and bound.arguments["gamma"] == 0.5
    assert bound.arguments["convention"] == "reference"  # the defaults fill in the rest
    values = np.array([1.0, 2.0, 0.5, -1.0, 3.0])
    expected = estimate("ppo", batch, values=values, lam=0.9, gamma=0.5)

    def refuse(self, options):
        raise AssertionError("options checked again")

    monkeypatch.setattr(EstimatorSpec, "check_options", refuse)
    rollouts = SimpleNamespace(steps=batch)  # the critic input comes from `values`, not the rollouts
    for _ in range(3):
        got = bound(rollouts, values)
        np.testing.assert_array_equal(got.advantages, expected.advantages)
        np.testing.assert_array_equal(got.returns, expected.returns)
        assert got.diagnostics == expected.diagnostics
    with pytest.raises(ValueError, match=r"input 'values' must have shape \(5,\)"):
        bound(rollouts, values[:3])
    with pytest.raises(ValueError, match="needs input 'values'"):
        bound(rollouts)


def test_config_load_checks_the_estimator_with_the_run_options(monkeypatch):
    """The config load binds the estimator to the options a run passes (the common ones from
    algorithm.*, environment defaults, algorithm.options), so a rule across options that the run's
    algorithm.gamma breaks fails at load, before any work (it used to see only the defaults and
    fail at the first iteration)."""
    pytest.importorskip("omegaconf")
    from g2po_bench.algorithms.registry import bind_run_estimator, run_estimator_options
    from g2po_bench.core.config import ConfigError
    from g2po_bench.runconfig import load_config

    name = "test_gamma_rule"
    try:
        def rule(options):
            return "needs gamma below 0.99" if options["gamma"] >= 0.99 else None

        @register_estimator(name, options={"depth": 1}, check=rule, description="test: gamma rule")
        def gamma_rule(b, *, gamma, depth):
            return AdvantageResult(np.full(len(b), gamma))

        with pytest.raises(ConfigError, match="algorithm.options.*needs gamma below 0.99"):
            load_config(overrides=[f"algorithm.name={name}", "algorithm.gamma=0.995"])
        cfg = load_config(overrides=[f"algorithm.name={name}", "algorithm.gamma=0.9", "algorithm.options.depth=3"])
        assert run_estimator_options(cfg) == {"mode": "mean_std_norm", "gamma": 0.9, "step_weight": 1.0,
                                              "invalid_penalty": 0.1, "success_reward": 10.0, "depth": 3}
        bound = bind_run_estimator(cfg)
        assert bound.arguments == {"gamma": 0.9, "depth": 3}  # only what its function takes
    finally:
        registry.spec._REGISTRY.pop(name, None)


def test_estimators_import_nothing_heavier_than_numpy():
    import subprocess
    import sys

    # discovery imports every estimator module; scipy (CRBC's solve) is imported only when used
    code = ("import sys; from g2po_bench.algorithms import available_estimators; "
            "from g2po_bench.algorithms.synthetic import reference_batch; available_estimators(); "
            "heavy = [m for m in ('torch', 'rapidfuzz', 'pandas', 'omegaconf', 'scipy') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_reference_batch_estimates_are_finite():
    b = reference_batch(np.random.default_rng(3))
    for name in BUILTINS:
        assert np.isfinite(estimate(name, b, inputs=_inputs(name, b)).advantages).all()
