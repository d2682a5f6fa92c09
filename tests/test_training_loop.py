"""The training loop (algorithms/backends/loop.py) with a stand-in backend: what the loop owns and
what it asks of a backend (issue 50, item 1: one loop for every backend, the backend a strategy).

The stand-in has no model: its policy draws seeded responses (tests/fake_rollouts.py), its
"weights" are a count of updates, and its critic gives fixed values. The toy environment plays the
episodes, so every record of the run folder is the real one.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from fake_rollouts import TokenPolicy, act

from g2po_bench.algorithms.backends.common import needs_critic
from g2po_bench.algorithms.backends.loop import TrainerBackend, TrainingLoop
from g2po_bench.algorithms.registry import (
    EstimatorSpec,
    estimate,
    rollout_inputs,
    run_estimator_options,
)
from g2po_bench.core.rundir import read_jsonl
from g2po_bench.runconfig import load_config

TOY = ["env.name=toy", "env.max_steps=3", "env.num_workers=1", "train.groups_per_batch=2", "train.group_size=2",
       "eval.num_tasks=2", "eval.every=2", "progress=false", "train.checkpoint_every=1"]


class StandIn(TrainerBackend):
    """A backend without a model: it records the loop's calls and what they were given."""

    name = "stand-in"

    def __init__(self, cfg):
        self.cfg = cfg
        self.calls: list[str] = []
        self.updates = 0  # the "weights"
        self.seen: list[tuple] = []  # (iteration, rollouts, result, values) of every update

    def start(self, run, progress):
        self.calls.append("start")
        self.run = run

    @contextlib.contextmanager
    def session(self, pool, train_tasks, resume_from):
        self.calls.append(f"session {'resume' if resume_from is not None else 'fresh'}")
        self.policy = TokenPolicy([act("go east"), act("go west"), act("look"), "no tags"])
        yield {"warm_start/key": "none"}
        self.calls.append("session end")

    def load(self, checkpoint):
        self.calls.append("load")
        if checkpoint is None:
            return None
        self.updates = json.loads((checkpoint / "weights.json").read_text())["updates"]
        return json.loads((checkpoint / "trainer_state.json").read_text())

    def generating(self):
        self.calls.append("generate")
        return contextlib.nullcontext()

    def values(self, rollouts):
        self.calls.append("values")
        return np.linspace(-1.0, 1.0, len(rollouts.steps)) if needs_critic(self.cfg) else None

    def update(self, rollouts, result, values, iteration):
        self.calls.append(f"update {iteration}")
        self.seen.append((iteration, rollouts, result, values))
        self.updates += 1
        return {"loss/pg_loss": float(np.sum(result.advantages)), "standin/updates": self.updates}

    def save(self, staging, iteration, trainer_state):
        self.calls.append(f"save {iteration}")
        (staging / "weights.json").write_text(json.dumps({"updates": self.updates}))

    def timing(self):
        return {"stand_in": True}


def _config(tmp_path, *extra):
    return load_config(None, [*TOY, f"output_dir={tmp_path / 'runs'}", "run_id=loop", *extra])


@pytest.mark.parametrize("estimator", ["g2po", "ppo"])
def test_the_loop_owns_the_run_and_asks_the_backend_for_models_and_updates(tmp_path, monkeypatch, estimator):
    cfg = _config(tmp_path, "train.iterations=2", f"algorithm.name={estimator}")
    checked = []  # the estimator's option checks during the run
    original = EstimatorSpec.check_options
    monkeypatch.setattr(EstimatorSpec, "check_options",
                        lambda self, options: (checked.append(self.name), original(self, options))[1])
    backend = StandIn(cfg)
    run = TrainingLoop(cfg, backend).run()
    assert checked == [estimator]  # the loop binds the run's estimator once, not once per iteration
    # the order of the loop: set-up, no checkpoint to load, the evaluations before RL at both
    # temperatures, each iteration (rollouts, values, update, its checkpoint), the final
    # evaluations, then the session's end
    assert backend.calls == [
        "start", "session fresh", "load", "generate", "generate",
        "generate", "values", "update 1", "save 1",
        "generate", "values", "update 2", "generate", "generate", "save 2",
        "session end"], backend.calls
    # the update gets the configured estimator's advantages of its rollouts, with the backend's
    # critic values where the estimator declares them (PPO's GAE reads them)
    options = run_estimator_options(cfg)
    for _, rb, res, values in backend.seen:
        assert (values is not None) == (estimator == "ppo")
        want = estimate(estimator, rb.steps, inputs=rollout_inputs(estimator, options, rb, values), **options)
        np.testing.assert_array_equal(res.advantages, want.advantages)
    metrics = read_jsonl(run.metrics_path)
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert [m["standin/updates"] for m in metrics] == [1, 2]
    for m, (_, rb, res, _) in zip(metrics, backend.seen):
        assert m["train/steps"] == len(rb.steps) and m["loss/pg_loss"] == float(np.sum(res.advantages))
        assert m["adv/adv_mean"] == res.diagnostics["adv_mean"]
    assert "eval/success_rate" in metrics[1] and "eval/success_rate" not in metrics[0]  # eval.every=2
    ev = json.loads(run.eval_path.read_text())
    assert [e["iteration"] for e in ev["history"]] == [0, 2]
    assert (ev["at_train_temperature"]["before"]["iteration"], ev["at_train_temperature"]["final"]["iteration"]) == (0, 2)
    assert json.loads(run.status_path.read_text())["state"] == "done"
    assert json.loads((run.root / "setup.json").read_text())["warm_start/key"] == "none"
    assert json.loads((run.root / "timing.json").read_text())["stand_in"] is True
    assert json.loads((run.checkpoint_dir / "weights.json").read_text()) == {"updates": 2}


def test_a_resume_loads_the_backends_checkpoint_and_continues_without_evaluating_again(tmp_path):
    first = StandIn(_config(tmp_path, "train.iterations=2"))
    TrainingLoop(first.cfg, first).run()
    cfg = _config(tmp_path, "train.iterations=3", "resume=true")
    backend = StandIn(cfg)
    run = TrainingLoop(cfg, backend).run()
    assert backend.calls[:3] == ["start", "session resume", "load"]
    assert "update 1" not in backend.calls and backend.calls.count("update 3") == 1
    assert backend.updates == 3  # the checkpoint's 2, then iteration 3
    assert [m["iteration"] for m in read_jsonl(run.metrics_path)] == [1, 2, 3]
    ev = json.loads(run.eval_path.read_text())
    assert [e["iteration"] for e in ev["history"]] == [0, 2, 3]  # no second evaluation before RL


def test_a_failing_update_marks_the_run_failed_without_a_checkpoint_of_it(tmp_path):
    class Failing(StandIn):
        def update(self, rollouts, result, values, iteration):
            raise RuntimeError("out of memory")

    cfg = _config(tmp_path, "train.iterations=2")
    backend = Failing(cfg)
    with pytest.raises(RuntimeError, match="out of memory"):
        TrainingLoop(cfg, backend).run()
    status = json.loads((tmp_path / "runs" / "loop" / "status.json").read_text())
    assert status["state"] == "failed" and status["error"] == "RuntimeError: out of memory"
    assert not any(c.startswith("save") for c in backend.calls)


def test_a_backend_without_the_required_methods_cannot_be_made():
    """session, update and save are abstract: a backend that lacks one fails when it is made, naming it."""
    from g2po_bench.algorithms.backends.loop import TrainerBackend

    class NoSave(TrainerBackend):
        def session(self, pool, train_tasks, resume_from):
            return contextlib.nullcontext({})

        def update(self, rollouts, result, values, iteration):
            return {}

    with pytest.raises(TypeError, match="save"):
        NoSave()
