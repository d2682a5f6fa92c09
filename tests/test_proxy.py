"""The CPU proxy (the embedded default of `g2po train`): its preset, its fixed panel, its prompt."""

from g2po_bench.benchmarks.evaluation import select_panel
from g2po_bench.core.config import config_to_dict
from g2po_bench.runconfig import load_config


def test_the_embedded_default_is_the_alfworld_cpu_preset():
    assert config_to_dict(load_config()) == config_to_dict(load_config(preset="alfworld_cpu"))


def test_default_panel_has_at_least_100_episodes_and_real_models_get_the_reference_prompt():
    cfg = load_config()
    assert cfg.eval.num_tasks == 0 and cfg.env.generated_eval_games * cfg.eval.episodes_per_task >= 100
    assert cfg.env.prompt == "compact"
    assert load_config(None, ["env.name=webshop"]).env.prompt == "reference"


def test_a_folder_of_the_tiny_model_gets_the_compact_prompt_and_a_real_model_the_reference(tmp_path):
    real, tiny = tmp_path / "qwen", tmp_path / "warm_start_policy"
    real.mkdir()
    tiny.mkdir()
    (tiny / "g2po_tiny.json").write_text("{}")  # what build_tiny_model and every checkpoint of it carry
    assert load_config(None, [f"model.path={real}"]).env.prompt == "reference"
    assert load_config(None, [f"model.path={tiny}"]).env.prompt == "compact"
    assert load_config(None, [f"model.path={tiny}", "env.prompt=reference"]).env.prompt == "reference"


def test_panel_is_fixed_and_of_the_configured_size(tmp_path):
    from g2po_bench.benchmarks.registry import get_benchmark

    games = [f"env.generated_dir={tmp_path / 'games'}", "env.generated_train_games=6",
             "env.generated_eval_games=12"]
    bench = get_benchmark("alfworld")
    panels = []
    for extra in (["seed=0"], ["seed=3", "algorithm.name=grpo"], ["seed=1", "eval.num_tasks=0"]):
        cfg = load_config(None, [*games, *extra])
        panels.append([t.task_id for t in select_panel(bench.load_tasks(cfg.env, cfg.env.eval_split),
                                                        cfg.eval.num_tasks)])
    assert len(panels[0]) == 12 and panels[0] == panels[1] == panels[2]
    cfg = load_config(None, [*games, "eval.num_tasks=6"])
    six = select_panel(bench.load_tasks(cfg.env, cfg.env.eval_split), 6)
    assert len(six) == 6 and len({t.task_type for t in six}) == 6  # round robin over the task types
