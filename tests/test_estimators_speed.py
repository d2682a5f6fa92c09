"""The advantage-estimator speed figures (algorithms/speed.py, `g2po bench advantages`) on small sizes."""

from __future__ import annotations

from g2po_bench.algorithms.speed import format_table, main, run_advantage_benchmark


def test_benchmark_rows_and_extrapolation():
    rows = run_advantage_benchmark(
        sizes=(1000, 3000), estimators=["grpo", "g2po"], repeats=1, min_time=0.0,
        oracle_time_limit=1e-9,
    )
    assert [(r["estimator"], r["size"]) for r in rows] == [
        ("grpo", "1000"), ("g2po", "1000"), ("grpo", "3000"), ("g2po", "3000")]
    for r in rows:
        assert r["rows"] > 0 and r["fast_ms"] > 0 and r["fast_rows_per_s"] > 0
        assert r["speedup"] is not None and r["speedup"] > 0
    # the first size is measured; with a 1 ns limit the next one is extrapolated from its rate
    assert [r["oracle"] for r in rows] == ["measured", "measured", "extrapolated", "extrapolated"]
    assert "extrapolated" in format_table(rows)


def test_benchmark_cli(capsys):
    assert main(["--sizes", "reference", "--estimators", "ppo", "rloo", "--repeats", "1",
                 "--no-oracle"]) == 0
    out = capsys.readouterr().out
    assert "reference" in out and "ppo" in out and "rloo" in out
