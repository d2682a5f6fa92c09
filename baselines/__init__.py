"""Prompting baselines on the shared harness: direct prompting, ReAct and Reflexion.

Their runs use the same environments, step limits, evaluation panels and EVAL record as the
RL runs, so :mod:`analysis` puts their rows in the same tables.

Public API (imported lazily, so ``import baselines`` is cheap):

- :func:`run_baseline` (``g2po_bench.baselines.run``): run one baseline and write its run folder;
- :func:`load_baseline_config`, :class:`BaselineConfig` (``g2po_bench.baselines.config``);
- :func:`make_policy` (``g2po_bench.baselines.policies``): ``"local" | "vllm" | "openai"``;
- :func:`run_react`, :func:`run_reflexion`, :func:`run_direct` (``g2po_bench.baselines.agents``);
- :func:`select_examples` (``g2po_bench.baselines.fewshot``): few-shot transcripts from expert walkthroughs;
- :func:`ensure_smollm2` (``g2po_bench.baselines.smollm2``): the cached SmolLM2-135M-Instruct folder.

Command line: ``g2po eval baseline=react model.path=smollm2 env=alfworld env.data_dir=...``
(see :mod:`g2po_bench.baselines.config`); success and speed on the panels: ``python -m g2po_bench.baselines.measure``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["run_baseline", "run_baseline_cli", "load_baseline_config", "BaselineConfig", "make_policy",
           "run_react", "run_reflexion", "run_direct", "select_examples", "ensure_smollm2"]

_WHERE = {
    "run_baseline": "g2po_bench.baselines.run", "run_baseline_cli": "g2po_bench.baselines.run",
    "load_baseline_config": "g2po_bench.baselines.config", "BaselineConfig": "g2po_bench.baselines.config",
    "make_policy": "g2po_bench.baselines.policies", "run_react": "g2po_bench.baselines.agents", "run_reflexion": "g2po_bench.baselines.agents",
    "run_direct": "g2po_bench.baselines.agents", "select_examples": "g2po_bench.baselines.fewshot", "ensure_smollm2": "g2po_bench.baselines.smollm2",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'baselines' has no attribute {name!r}")
