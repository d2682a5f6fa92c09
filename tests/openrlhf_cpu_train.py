"""Test support: ``g2po train backend=openrlhf KEY=VALUE ...`` on the CPU stand-ins.

What the ``g2po train`` command does for ``backend=openrlhf`` (load the config, refuse a fresh start
over a finished run, train under the training loop's signal policy, exit with 128 + signal when
stopped), with the OpenRLHF trainer's workers injected: ``tests/openrlhf_cpu_workers.py``. Run as
``python tests/openrlhf_cpu_train.py key=value ...`` (tests/ and, where needed, tests/stubs on
PYTHONPATH).
"""

from __future__ import annotations

import sys

from openrlhf_cpu_workers import CPUWorkers
from rich.console import Console

from g2po_bench.algorithms.backends.openrlhf.trainer import train
from g2po_bench.runconfig import load_config
from g2po_bench.train import check_fresh_run_folder


def main(argv: list[str]) -> int:
    console = Console(stderr=True, soft_wrap=True)
    cfg = load_config(None, argv)
    check_fresh_run_folder(cfg)
    run = train(cfg, console=console, workers=CPUWorkers())
    console.print(f"run folder: {run.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
