"""Resource layout of the OpenRLHF backend: GPUs, nodes, vLLM engines, DeepSpeed ZeRO.

None of these settings changes what is computed (the algorithm, its hyper-parameters and the
rollouts come from the run config, exactly as for ``backend=local``); they only say where and
how: how many nodes and GPUs, how many vLLM engines, which ZeRO stage, whether the models share
GPUs. Sources, later ones win:

1. the defaults below (one node; every visible GPU; actor, reference, critic and vLLM colocated
   on every GPU with OpenRLHF's sleep modes, which works from one GPU upwards);
2. an ``openrlhf`` section of the run config, if the config has one (a mapping or dataclass
   with any of the field names below);
3. environment variables ``G2PO_OPENRLHF_<FIELD>`` (upper case), e.g.
   ``G2PO_OPENRLHF_ZERO_STAGE=3`` or ``G2PO_OPENRLHF_VLLM_NUM_ENGINES=2``.

The node count and GPUs per node default to the allocation the sweeps launcher exports
(``G2PO_NUM_NODES``, ``G2PO_GPUS_PER_NODE``; see :mod:`g2po_bench.algorithms.backends.openrlhf.cluster`),
else Slurm's variables, else one node with the GPUs torch sees.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["OpenRLHFSettings", "load_settings", "ENV_PREFIX", "COLOCATE_CHOICES"]

ENV_PREFIX = "G2PO_OPENRLHF_"
COLOCATE_CHOICES = ("all", "actor_ref", "none")


@dataclass
class OpenRLHFSettings:
    """Where the OpenRLHF backend runs (see the module docstring for the sources).

    Attributes:
        num_nodes: nodes of the Ray cluster (0 = from the allocation, else 1).
        gpus_per_node: GPUs per node (0 = from the allocation, else ``torch.cuda.device_count()``).
        colocate: ``all``: actor, reference, critic and the vLLM engines share every GPU
            (OpenRLHF ``--train.colocate_all``; one engine per GPU by default); ``actor_ref``:
            actor and reference share the training GPUs, the vLLM engines (and the critic) get
            GPUs of their own; ``none``: every model on GPUs of its own.
        actor_gpus: GPUs of each model group (actor; reference under ``none``; critic) when not
            ``all`` (0 = split what the engines leave evenly between the groups).
        vllm_num_engines: vLLM engines (0 = one per ``vllm_tensor_parallel_size`` GPUs under
            ``all``, else 1).
        vllm_tensor_parallel_size: GPUs per vLLM engine.
        vllm_gpu_memory_utilization: fraction of a GPU's memory for vLLM (0 = 0.5 when
            colocated, else 0.9).
        vllm_enable_sleep / ds_enable_sleep: OpenRLHF's sleep modes (offload vLLM's KV cache and
            the DeepSpeed states while the other side works); None = on when ``colocate=all``.
        vllm_enable_prefix_caching: step prompts of one task share long prefixes.
        vllm_enforce_eager: disable CUDA graphs in vLLM (saves memory and start-up time).
        zero_stage: DeepSpeed ZeRO stage (2; use 3 for 14B and larger).
        adam_offload / ref_offload: offload Adam states / the reference model to CPU.
        gradient_checkpointing: activation checkpointing in the actor and critic.
        attn_implementation: ``auto`` (flash_attention_2 when flash-attn is installed, else
            sdpa), or any value transformers accepts.
        ray_address: an existing Ray cluster to join (e.g. ``auto``); empty = start one.
        node_wait_s: seconds the head waits for the other nodes to join.
    """

    num_nodes: int = 0
    gpus_per_node: int = 0
    colocate: str = "all"
    actor_gpus: int = 0
    vllm_num_engines: int = 0
    vllm_tensor_parallel_size: int = 1
    vllm_gpu_memory_utilization: float = 0.0
    vllm_enable_sleep: bool | None = None
    ds_enable_sleep: bool | None = None
    vllm_enable_prefix_caching: bool = True
    vllm_enforce_eager: bool = False
    zero_stage: int = 2
    adam_offload: bool = False
    ref_offload: bool = False
    gradient_checkpointing: bool = True
    attn_implementation: str = "auto"
    ray_address: str = ""
    node_wait_s: float = 900.0

    # ------------------------------------------------------------------ derived values
    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def resolved(self, *, needs_ref: bool = True, needs_critic: bool = False) -> OpenRLHFSettings:
        """A copy with every ``0``/``None``/``auto`` filled in and the layout checked.

        Args:
            needs_ref: a reference model is used (KL coefficient > 0).
            needs_critic: a critic is used (the ``ppo`` estimator).

        Raises:
            ValueError: a value out of range or a layout that does not fit the GPUs.
        """
        s = dataclasses.replace(self)
        if s.colocate not in COLOCATE_CHOICES:
            raise ValueError(f"openrlhf.colocate={s.colocate!r}; choose one of {', '.join(COLOCATE_CHOICES)}")
        if s.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"openrlhf.zero_stage={s.zero_stage}; choose 0, 1, 2 or 3")
        if s.vllm_tensor_parallel_size < 1:
            raise ValueError("openrlhf.vllm_tensor_parallel_size must be >= 1")
        if s.num_nodes <= 0:
            s.num_nodes = _allocation_nodes()
        if s.gpus_per_node <= 0:
            s.gpus_per_node = _allocation_gpus()
        if s.gpus_per_node <= 0:
            raise ValueError(
                "backend=openrlhf needs GPUs: none visible (set G2PO_OPENRLHF_GPUS_PER_NODE, or use "
                "backend=local on a CPU machine)"
            )
        tp = s.vllm_tensor_parallel_size
        colocated = s.colocate == "all"
        if s.vllm_num_engines <= 0:
            s.vllm_num_engines = max(1, s.total_gpus // tp) if colocated else 1
        engine_gpus = s.vllm_num_engines * tp
        if colocated:
            if engine_gpus != s.total_gpus:
                raise ValueError(
                    f"colocate=all needs vllm_num_engines x vllm_tensor_parallel_size = all GPUs "
                    f"({s.num_nodes} x {s.gpus_per_node}); got {s.vllm_num_engines} x {tp}"
                )
            s.actor_gpus = s.total_gpus
        else:
            groups = 1 + int(needs_ref and s.colocate == "none") + int(needs_critic)
            if s.actor_gpus <= 0:
                s.actor_gpus = (s.total_gpus - engine_gpus) // groups
            if s.actor_gpus < 1 or s.actor_gpus * groups + engine_gpus > s.total_gpus:
                raise ValueError(
                    f"layout does not fit: {groups} model group(s) x {max(s.actor_gpus, 1)} GPUs + "
                    f"{engine_gpus} vLLM GPUs > {s.total_gpus} GPUs ({s.num_nodes} x {s.gpus_per_node})"
                )
            if s.actor_gpus > s.gpus_per_node and s.actor_gpus % s.gpus_per_node:
                raise ValueError(
                    f"actor_gpus={s.actor_gpus} spans nodes: use a multiple of gpus_per_node={s.gpus_per_node}"
                )
        if s.vllm_gpu_memory_utilization <= 0:
            s.vllm_gpu_memory_utilization = 0.5 if colocated else 0.9
        if s.vllm_enable_sleep is None:
            s.vllm_enable_sleep = colocated
        if s.ds_enable_sleep is None:
            s.ds_enable_sleep = colocated
        if s.attn_implementation == "auto":
            s.attn_implementation = _default_attention()
        return s

    def group_shape(self) -> tuple[int, int]:
        """(nodes, GPUs per node) of each model group (actor, reference, critic), once resolved."""
        if self.actor_gpus <= self.gpus_per_node:
            return 1, self.actor_gpus
        return self.actor_gpus // self.gpus_per_node, self.gpus_per_node

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------- loading
def load_settings(cfg: Any = None, environ: Mapping[str, str] | None = None) -> OpenRLHFSettings:
    """Defaults < ``cfg.openrlhf`` (when the run config has such a section) < environment.

    Args:
        cfg: the RunConfig (or None).
        environ: the environment to read (default ``os.environ``).

    Raises:
        ValueError: an unknown key in the config section, or a value that does not parse.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    section = getattr(cfg, "openrlhf", None) if cfg is not None else None
    if section is not None:
        raw = section if isinstance(section, Mapping) else (
            dataclasses.asdict(section) if dataclasses.is_dataclass(section) else vars(section))
        known = {f.name for f in fields(OpenRLHFSettings)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown openrlhf setting(s) {unknown}; known: {sorted(known)}")
        values.update({k: v for k, v in raw.items() if v is not None or k.endswith("_sleep")})
    for f in fields(OpenRLHFSettings):
        key = ENV_PREFIX + f.name.upper()
        if key in env and env[key] != "":
            values[f.name] = _parse(f.name, f.type, env[key])
    return OpenRLHFSettings(**values)


def _parse(name: str, typ: Any, text: str) -> Any:
    t = str(typ)
    try:
        if "bool" in t:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            if low in ("", "none", "auto") and "None" in t:
                return None
            raise ValueError(text)
        if t == "int":
            return int(text)
        if t == "float":
            return float(text)
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={text!r} is not a valid {t}") from None
    return text


def _allocation_nodes(environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    for key in ("G2PO_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if env.get(key, "").strip().isdigit():
            return max(1, int(env[key]))
    return 1


def _allocation_gpus(environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    for key in ("G2PO_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"):
        if env.get(key, "").strip().isdigit() and int(env[key]) > 0:
            return int(env[key])
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # pragma: no cover - torch always importable in this project
        return 0


def _default_attention() -> str:
    import importlib.util

    spec = importlib.util.find_spec("flash_attn")
    if spec is not None and spec.origin and "stubs" not in spec.origin:
        return "flash_attention_2"
    return "sdpa"
