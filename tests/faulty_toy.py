"""Test support: the toy corridor with fault injection, for the harness's restart paths.

``faulty_toy`` is the corridor whose action ``raise error`` makes ``step`` raise and ``kill process``
ends the worker process abruptly (``os._exit``), so that the rollout engine's restart path is tested
without a flaky real environment. A task whose payload sets ``"slip"`` (a probability) is not
deterministic: a move fails with that probability ("You slip and stay in room k of n."), drawn from
an unseeded generator, so replaying the same actions can give other observations (the replay check
of the credit instrument must refuse it). It is registered in the test process only (environment
workers forked afterwards inherit it); the product's toy benchmark has no such actions.
"""

from __future__ import annotations

import os
import random

from g2po_bench.benchmarks.registry import get_benchmark, register_benchmark
from g2po_bench.benchmarks.toy import CorridorEnv, ToyBenchmark

NAME = "faulty_toy"


class FaultyCorridorEnv(CorridorEnv):
    """The corridor plus the two fault actions and the slip (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.slip = 0.0
        self._rng = random.Random(int.from_bytes(os.urandom(8), "little"))

    def reset(self, task):
        self.slip = float(task.payload.get("slip", 0.0))
        return super().reset(task)

    def step(self, action: str):
        if action == "raise error":
            raise RuntimeError("injected environment error")
        if action == "kill process":
            os._exit(3)
        if action in ("go east", "go west") and self.slip > 0 and self._rng.random() < self.slip:
            return self._obs(f"You slip and stay in room {self.pos} of {self.length}.")
        return super().step(action)


class FaultyToyBenchmark(ToyBenchmark):
    """The toy benchmark whose environments are :class:`FaultyCorridorEnv`."""

    name = NAME

    def make_env(self, cfg):
        return FaultyCorridorEnv()


def faulty_toy() -> ToyBenchmark:
    """The registered ``faulty_toy`` benchmark (registered on first call)."""
    try:
        return get_benchmark(NAME)
    except ValueError:
        return register_benchmark(FaultyToyBenchmark())
