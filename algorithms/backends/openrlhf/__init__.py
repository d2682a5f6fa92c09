"""The OpenRLHF trainer backend (``backend=openrlhf``): Ray, DeepSpeed ZeRO and vLLM.

The suite's rollout engine drives OpenRLHF 0.11.2's vLLM engines (:mod:`.engine_policy`), the suite's
registry estimator computes the per-step advantages (:mod:`.advantages`), and one OpenRLHF
sample per agent step carries them as per-token advantages with an action mask over the
response tokens only (:mod:`.experience`, :mod:`.experience_maker`); OpenRLHF's actor,
reference and critic Ray actor groups do the log-probs and the DeepSpeed updates, and its
weight sync refreshes the engines after every update (:mod:`.trainer`). Ray on one node or on
a Slurm allocation: :mod:`.cluster`; GPUs and engines: :mod:`.settings`; the OpenRLHF
arguments and their check by OpenRLHF's own parser: :mod:`.args`.

Install (GPU machines): ``pip install -e ".[openrlhf]"`` plus vLLM and flash-attn, see the
README. Importing this package needs none of it: OpenRLHF, Ray, DeepSpeed, vLLM and
flash-attn are imported when :func:`train` runs.
"""

from __future__ import annotations

import importlib.util

from g2po_bench.core.errors import MissingDependencyError

__all__ = ["train", "missing_requirements", "REQUIRED_MODULES"]

REQUIRED_MODULES = ("openrlhf", "ray", "deepspeed", "vllm", "flash_attn")
_INSTALL_HINT = (
    "backend=openrlhf needs OpenRLHF 0.11.2 and its GPU stack: pip install -e '.[openrlhf]' "
    "plus vllm==0.29.0 and flash-attn on a GPU machine (see the README)"
)


def missing_requirements() -> list[str]:
    """Modules the backend needs that are not importable (``flash_attn`` and ``vllm`` are
    import-time needs of OpenRLHF on every device)."""
    return [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]


def train(cfg, console=None, pictures=None):
    """Train ``cfg`` with the OpenRLHF backend; returns the run folder (a RunDir). ``pictures``:
    the tracker pictures' drawer (:class:`g2po_bench.core.tracking.RunPictures`, optional).

    Raises:
        g2po_bench.core.errors.MissingDependencyError: OpenRLHF or part of its stack is not
            installed (an ``ImportError``; the message says how to install it; the CLI prints it as
            one line).
    """
    missing = missing_requirements()
    if missing:
        raise MissingDependencyError(f"{_INSTALL_HINT}; missing: {', '.join(missing)}")
    # lazy: the trainer imports OpenRLHF, Ray, DeepSpeed and vLLM (optional GPU dependencies)
    from g2po_bench.algorithms.backends.openrlhf.trainer import train as _train

    return _train(cfg, console=console, pictures=pictures)
