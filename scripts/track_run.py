"""Send a finished run folder's records to the experiment trackers, after the fact.

A run trained without a tracker (or a committed run record) gets the same tracker view a run
with ``logging.backends=[...,tensorboard,wandb]`` builds while it trains: every ``metrics.jsonl``
value and every evaluation of ``eval.json`` at its iteration (:func:`g2po_bench.core.tracking.run_steps`),
the resolved config as hyper-parameters, the run id, commit and machine of ``status.json``, the
learning curve after the last iteration and, with ``logging.graph_every=N`` and recorded step
tables, a task group's state graph every N iterations.

Usage::

    python scripts/track_run.py RUN [--out DIR] [logging.KEY=VALUE ...]

``RUN`` is read only; the tracker files go to ``--out`` (default: ``RUN`` itself). Example, the
TensorBoard view of a committed CPU-default run (docs/tracking.md)::

    python scripts/track_run.py results/proxy/sweep/runs/alfworld-g2po-s0-1acd082ae3 \\
        --out /tmp/tb/alfworld-g2po-s0-1acd082ae3 logging.backends=[tensorboard] logging.graph_every=54
    tensorboard --logdir /tmp/tb

Exit status 0, or 2 with one line for bad input (no run folder, a bad ``logging`` key).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Send a finished run folder's records (config, metrics, evaluations, pictures) to the
    trackers its ``logging.KEY=VALUE`` overrides select; returns the exit status (2: a bad
    config, tracker or run folder, said in one line)."""
    from g2po_bench.analysis.pictures import AnalysisPictures
    from g2po_bench.core.config import ConfigError, config_to_dict, config_to_yaml
    from g2po_bench.core.rundir import RunDir, machine_label
    from g2po_bench.core.tracking import Tracker, TrackingError, run_steps
    from g2po_bench.runconfig import load_config

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a run folder (config.yaml, metrics.jsonl, eval.json)")
    ap.add_argument("--out", default=None, help="where the tracker files go (default: the run folder)")
    ap.add_argument("overrides", nargs="*", help="logging.KEY=VALUE settings")
    a = ap.parse_intermixed_args(argv)
    run = RunDir(a.run)
    bad = [o for o in a.overrides if not o.startswith("logging.")]
    try:
        if not run.config_path.is_file():
            raise ConfigError(f"{a.run!r} is not a run folder (no config.yaml)")
        if bad:
            raise ConfigError(f"only logging.* settings are accepted here, not {', '.join(bad)}")
        cfg = load_config(run.config_path, a.overrides)
        out = Path(a.out) if a.out else run.root
        status = run.read_status() or {}
        code = status.get("code") or {}
        info = {"run_id": run.run_id, "commit": code.get("commit"), "dirty": code.get("dirty"),
                "machine": machine_label(status.get("machine")), "run_folder": str(run.root.resolve())}
        evals = json.loads(run.eval_path.read_text()) if run.eval_path.is_file() else None
        steps = run_steps(run.read_metrics(), evals)
        tracker = Tracker(out, cfg.logging, run_id=run.run_id, config=config_to_dict(cfg), info=info,
                          config_yaml=config_to_yaml(cfg))
    except (ConfigError, TrackingError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    pictures = AnalysisPictures()
    lg = cfg.logging
    last = max(steps, default=0)
    for step, scalars in steps.items():
        images = {}
        if tracker.wants_images and lg.graph_every and step > 0 and step % lg.graph_every == 0:
            png = pictures.state_graph(run.root, step, lg.graph_group, out / "pictures" / f"state_graph_iter{step:05d}.png")
            if png is not None:
                images["pictures/state_graph"] = png
        if tracker.wants_images and lg.learning_curve and step == last and step > 0:
            png = pictures.learning_curve(run.root, out / "pictures" / "learning_curve.png")
            if png is not None:
                images["pictures/learning_curve"] = png
        tracker.publish(step, scalars, images)
    tracker.close("done" if status.get("state") == "done" else "interrupted")
    print(f"{len(steps)} steps of {run.run_id} sent to {', '.join(lg.backends)} ({out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
