"""``g2po train --preset appworld_cpu`` end to end (2 iterations on factory-built tasks, CPU),
then ``g2po report`` on its run folder (Table 2 layout). Needs the AppWorld interpreter
(skipped with the reason without it, failed in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from g2po_bench.benchmarks.appworld.runtime import AppWorldUnavailable, find_python

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_appworld_cpu_preset_trains_two_iterations_and_reports(tmp_path):
    try:
        python = find_python(None)
    except AppWorldUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(f"no AppWorld interpreter: {exc}")
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "g2po_bench.cli", "train", "--preset", "appworld_cpu", f"output_dir={runs}",
           f"train.warm_start_cache={tmp_path / 'warm_start'}", f"env.appworld_generated_dir={tmp_path / 'tasks'}",
           f"env.appworld_python={python}", "progress=false", "run_id=appworld-smoke",
           # smaller than the preset, to keep CI short: 3 steps, 2 eval tasks, a smaller model, no SFT
           "env.max_steps=3", "eval.num_tasks=2", "model.hidden_size=64", "model.intermediate_size=128",
           "train.sft_epochs=0"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = runs / "appworld-smoke"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert all(m["train/steps"] > 0 and m["train/crashed"] == 0 for m in metrics)
    ev = json.loads((run / "eval.json").read_text())
    assert ev["env"] == "appworld" and ev["final"]["iteration"] == 2 and ev["final"]["num_episodes"] == 2
    assert ev["final"]["score"] is not None  # scenario goal completion
    assert json.loads((run / "status.json").read_text())["state"] == "done"
    assert "name: appworld" in (run / "config.yaml").read_text()

    out = tmp_path / "report"
    r = subprocess.run([sys.executable, "-m", "g2po_bench.cli", "report", str(runs), "--out", str(out), "--no-figures",
                        "--n-boot", "200"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table2 = next(out.rglob("table2*.md")).read_text()
    assert "AppWorld Success" in table2 and "27.6" in table2  # ours beside the published G2PO row
    assert "tiny" in table2
