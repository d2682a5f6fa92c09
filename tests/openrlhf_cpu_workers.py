"""Test support: the OpenRLHF backend's workers as CPU stand-ins (``tests/openrlhf_standins.py``),
injected into the trainer: ``train(cfg, workers=CPUWorkers())`` (:mod:`g2po_bench.algorithms.backends.openrlhf.trainer`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from openrlhf.trainer.ray.launcher import RayActorGroup
from openrlhf_standins import (
    CPUCriticActor,
    CPUModelActor,
    CPUReferenceActor,
    HFRolloutEngine,
    cpu_sampling_params,
)

from g2po_bench.algorithms.backends.openrlhf.settings import OpenRLHFSettings
from g2po_bench.algorithms.backends.openrlhf.trainer import Stack, Workers

__all__ = ["CPUWorkers"]


class CPUWorkers(Workers):
    """The stand-ins above as the OpenRLHF backend's workers: one rank per model group, the engines
    as :class:`HFRolloutEngine` actors, Ray started without GPUs."""

    def resolve(self, settings: OpenRLHFSettings, *, needs_ref: bool = True,
                needs_critic: bool = False) -> OpenRLHFSettings:
        s = dataclasses.replace(settings, num_nodes=1, gpus_per_node=1, actor_gpus=1,
                                vllm_num_engines=max(1, settings.vllm_num_engines), vllm_tensor_parallel_size=1,
                                vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization or 0.5,
                                vllm_enable_sleep=bool(settings.vllm_enable_sleep),
                                ds_enable_sleep=bool(settings.ds_enable_sleep),
                                attn_implementation=("eager" if settings.attn_implementation == "auto"
                                                     else settings.attn_implementation))
        return s

    def ray_resources(self) -> dict:
        return {"num_cpus": max(2, os.cpu_count() or 2), "num_gpus": 0}

    def worker_env(self) -> dict[str, str]:
        here = str(Path(__file__).resolve().parent)
        paths = [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != here]
        return {"PYTHONPATH": os.pathsep.join(paths)}

    def build(self, args, strategy, settings: OpenRLHFSettings, model_path: str, max_steps: int) -> Stack:
        import ray

        engines = [ray.remote(num_cpus=0)(HFRolloutEngine).remote(model_path)
                   for _ in range(args.vllm.num_engines)]

        def group(cls):
            return RayActorGroup(1, 1, ray.remote(num_cpus=0)(cls), pg=None, num_gpus_per_actor=0)

        actor = group(CPUModelActor)
        ref = group(CPUReferenceActor) if args.algo.kl.init_coef > 0 else None
        critic = group(CPUCriticActor) if args.critic.model_name_or_path else None
        return self.initialise(Stack(engines=engines, actor=actor, reference=ref, critic=critic,
                                     sampling_params=cpu_sampling_params, dp_ranks=1),
                               strategy, model_path, max_steps)
