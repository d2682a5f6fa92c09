#!/usr/bin/env python3
"""One-GPU smoke test of the OpenRLHF backend: two iterations of G2PO, seconds per phase.

Runs ``g2po train backend=openrlhf`` for two iterations on a single GPU (Ray started locally;
actor, reference and one vLLM engine colocated on the GPU with OpenRLHF's sleep modes), then
prints the seconds of each phase per iteration: generation (the suite's rollout engine on the
vLLM engine), reference and old log-probs (OpenRLHF's make_experience on the actor and
reference groups), advantages (the registry's G2PO), update (DeepSpeed ZeRO-2 fit), and the
weight sync to vLLM.

Usage, on a machine with one CUDA GPU and the GPU install of the README::

    python3 scripts/openrlhf_smoke.py                                   # tiny model built locally
    python3 scripts/openrlhf_smoke.py --model /models/Qwen2.5-0.5B-Instruct
    python3 scripts/openrlhf_smoke.py --env toy --out /tmp/smoke        # no ALFWorld games needed

Without ``--model`` it builds the project's tiny Llama model (no download; untrained, so its
actions are mostly invalid: the point is the pipeline and the timings). The ALFWorld games are
generated offline from the ``alfworld`` wheel. Exit code 0 when both iterations ran; the run
folder is kept (``--out``, default ``results/runs/openrlhf-smoke``).

Status: written without access to a GPU; it has not been run (see the README).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# adv_s: the seconds from the rollouts to the update (the model forwards of logprob_s and the estimator)
PHASES = (("rollout_s", "generation"), ("logprob_s", "ref+old log-probs"), ("adv_s", "log-probs+advantages"),
          ("update_s", "update"), ("sync_s", "weight sync"), ("iter_s", "iteration"))


def main(argv: list[str] | None = None) -> int:
    """Run two G2PO iterations with backend=openrlhf on one GPU and print seconds per phase."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="local HF model folder (default: build the tiny model)")
    ap.add_argument("--env", default="alfworld", choices=["alfworld", "toy", "webshop"])
    ap.add_argument("--out", default=str(ROOT / "results" / "runs"), help="output_dir of the run")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM gpu_memory_utilization")
    ap.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    a = ap.parse_args(argv)

    import torch

    from g2po_bench.algorithms.backends.openrlhf import missing_requirements

    missing = missing_requirements()
    if missing or not torch.cuda.is_available():
        print(f"needs one CUDA GPU and the OpenRLHF GPU stack (missing: {', '.join(missing) or 'none'}; "
              f"CUDA available: {torch.cuda.is_available()}); see the README", file=sys.stderr)
        return 2
    os.environ.setdefault("G2PO_OPENRLHF_GPUS_PER_NODE", "1")
    os.environ.setdefault("G2PO_OPENRLHF_COLOCATE", "all")
    os.environ.setdefault("G2PO_OPENRLHF_VLLM_GPU_MEMORY_UTILIZATION", str(a.vllm_memory))
    os.environ.setdefault("G2PO_OPENRLHF_VLLM_ENFORCE_EAGER", "true")  # faster start-up
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from g2po_bench.runconfig import load_config
    from g2po_bench.train import run_train

    overrides = [
        "backend=openrlhf", "algorithm.name=g2po", f"env.name={a.env}", "env.max_steps=8",
        f"train.iterations={a.iterations}", "train.groups_per_batch=4", "train.group_size=4",
        "train.micro_batch_size=8", "train.mini_batch_size=32", "train.sft_epochs=0",
        "model.device=cuda", "eval.num_tasks=4", "eval.every=0",
        f"output_dir={a.out}", "run_id=openrlhf-smoke", "progress=false",
    ]
    if a.model:
        overrides += [f"model.path={a.model}", "train.max_prompt_tokens=2048", "train.max_response_tokens=128",
                      "train.lr=1e-6"]
    cfg = load_config(overrides=overrides + list(a.overrides))
    print(f"backend=openrlhf smoke: {a.iterations} iterations of G2PO on {a.env}, model "
          f"{a.model or 'tiny (built locally)'}, "
          + f"GPU {torch.cuda.get_device_name(0)}", flush=True)
    t0 = time.time()
    run = run_train(cfg)
    total = time.time() - t0
    recs = [json.loads(line) for line in run.metrics_path.read_text().splitlines() if line.strip()]
    print(f"\nseconds per phase ({run.root}):")
    print("iteration " + "".join(f"{name:>19}" for _, name in PHASES) + "   steps  success")
    for r in recs:
        print(f"{r['iteration']:>9} " + "".join(f"{r.get(k, float('nan')):>19.2f}" for k, _ in PHASES)
              + f"{r['train/steps']:>8}  {r['train/success_rate']:.0%}")
    print(f"total wall time including start-up (Ray, vLLM, DeepSpeed) and evaluations: {total:.0f} s")
    ok = len(recs) == a.iterations and all(r.get("update_s", 0) > 0 for r in recs)
    print("OK" if ok else "FAILED: missing iterations or phases")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
