"""The committed WebShop estimator comparison (results/webshop_cpu): its run records are still what
``sweeps/specs/webshop_cpu.yaml`` plans, and its report is what ``g2po report`` gives on them.

The 21 runs (GRPO, GiGPO w/ std, G2PO, CRBC, HGPO, GraphGPO, EMPG x seeds 0-2 on ``--preset
webshop_cpu``) are committed without checkpoints. Run ids are config hashes: a refactor that
changed a run's id would orphan the records, and a change to the report's statistics would leave
the committed tables stale; both fail here. No WebShop data is read. (The credit study of the same
warm start against these runs: tests/test_credit_vs_end_to_end.py.)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from g2po_bench.cli import main as g2po_main
from g2po_bench.core.config import resolve_run_id
from g2po_bench.runconfig import load_config

ROOT = Path(__file__).resolve().parents[1] / "results" / "webshop_cpu"
RUNS = ROOT / "sweep" / "runs"
METHODS = ("grpo", "gigpo", "g2po", "crbc", "hgpo", "graphgpo", "empg")


def test_every_committed_run_is_one_of_the_specs_and_hashes_to_its_folder():
    """Seeds 0-2 of the seven estimators, each config.yaml hashing to its folder's name."""
    ids = sorted(p.name for p in RUNS.iterdir() if p.is_dir())
    assert sorted((i.split("-")[1], int(i.split("-")[2][1:])) for i in ids) == \
        sorted((m, s) for m in METHODS for s in range(3))
    for run_id in ids:
        cfg = load_config(RUNS / run_id / "config.yaml", check_paths=False)
        assert cfg.env.name == "webshop" and cfg.train.iterations == 16 and cfg.eval.num_tasks == 200
        cfg.run_id = None  # derive it from the config again
        assert resolve_run_id(cfg) == run_id


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """``g2po report results/webshop_cpu/sweep/runs`` into a temporary folder, once."""
    out = tmp_path_factory.mktemp("webshop_report")
    assert g2po_main(["report", str(RUNS), "--out", str(out), "--no-figures"]) == 0
    return out


@pytest.mark.parametrize("name", ["improvement.csv", "improvement_score.csv", "differences.csv"])
def test_the_committed_report_is_what_the_committed_runs_give(regenerated, name):
    """The committed paired CIs (same bootstrap seed) are what the committed runs give."""
    pd.testing.assert_frame_equal(pd.read_csv(regenerated / name), pd.read_csv(ROOT / "report" / name))

