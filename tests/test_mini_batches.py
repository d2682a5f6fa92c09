"""Mini-batches of an iteration's step samples (issue 39, item 3): ``train.mini_batch_split``
"fixed" keeps the reference cut (a 1-row step when 129 rows meet a size of 128), "balanced" (the
local backend's default) never makes a step under ``mini_batch_size // 2`` rows nor over
``mini_batch_size``."""

from __future__ import annotations

import pytest

from g2po_bench.algorithms.backends.batching import mini_batch_sizes, split_mini_batches
from g2po_bench.core.config import ConfigError, config_hash
from g2po_bench.runconfig import load_config


def test_129_rows_at_128_fixed_keeps_the_one_row_step_balanced_does_not():
    assert mini_batch_sizes(129, 128, "fixed") == [128, 1]
    assert mini_batch_sizes(129, 128, "balanced") == [65, 64]
    assert mini_batch_sizes(128, 128, "balanced") == [128]
    assert mini_batch_sizes(100, 128, "balanced") == [100]  # fewer rows than one mini-batch: one step
    assert mini_batch_sizes(0, 128, "balanced") == []
    # the CPU default's largest iteration (seed 0): 1,108 rows -> 9 steps of 123-124 rows
    assert mini_batch_sizes(1108, 128, "balanced") == [124] * 1 + [123] * 8
    assert mini_batch_sizes(1108, 128, "fixed") == [128] * 8 + [84]


def test_balanced_bounds_over_every_row_count():
    for size in (1, 2, 7, 64, 128):
        for n in range(size, 5 * size + 3):
            sizes = mini_batch_sizes(n, size, "balanced")
            assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
            assert max(sizes) <= size and min(sizes) >= size // 2, (n, size, sizes)
            assert len(sizes) == -(-n // size)  # the fewest steps of at most `size` rows


def test_split_keeps_the_order_and_names_bad_input():
    rows = list(range(10))
    assert split_mini_batches(rows, 4, "fixed") == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert split_mini_batches(rows, 4, "balanced") == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    with pytest.raises(ValueError, match="unknown mini-batch split 'even'.*fixed, balanced"):
        mini_batch_sizes(10, 4, "even")
    with pytest.raises(ValueError, match="size >= 1"):
        mini_batch_sizes(10, 0)


def test_config_default_is_balanced_locally_fixed_on_openrlhf_and_fixed_keeps_run_ids():
    """``auto`` resolves when the config is loaded (the saved config records the rule): balanced
    for backend=local, fixed for openrlhf (it cuts its own mini-batches). ``fixed`` stays out of
    the hash (config.HASH_NEUTRAL_DEFAULTS), so configs recorded before the key keep their run ids;
    the local default is another config and gets another run id."""
    cfg = load_config()
    assert cfg.backend == "local" and cfg.train.mini_batch_split == "balanced"
    assert load_config(None, ["train.mini_batch_split=auto"]).train.mini_batch_split == "balanced"
    fixed = load_config(None, ["train.mini_batch_split=fixed"])
    balanced = load_config(None, ["train.mini_batch_split=balanced"])
    assert config_hash(balanced) == config_hash(cfg) != config_hash(fixed)
    from g2po_bench.core.config import parse_config

    assert parse_config(None, ["backend=openrlhf"]).train.mini_batch_split == "fixed"
    with pytest.raises(ConfigError, match="train.mini_batch_split"):
        load_config(None, ["train.mini_batch_split=even"])
    with pytest.raises(ConfigError, match="balanced.*local backend"):
        parse_config(None, ["backend=openrlhf", "train.mini_batch_split=balanced"])


def test_reference_presets_keep_the_reference_cut(tmp_path):
    """The GPU presets reproduce the reference, whose last mini-batch holds the remainder, on
    either backend; the CPU presets take the local default."""
    from g2po_bench.benchmarks.registry import preset_files
    from g2po_bench.core.config import parse_config

    files = preset_files()
    reference = [n for n in files if not n.endswith("_cpu")]
    assert len(reference) >= 5 and "alfworld_1.5b" in reference
    for name, path in sorted(files.items()):  # the GPU presets leave the data and model paths to the user
        given = [f"env.data_dir={tmp_path}"] + ([] if name.endswith("_cpu") else [f"model.path={tmp_path}"])
        cfg = parse_config(None, given, preset_file=path)
        rule = cfg.train.mini_batch_split
        assert rule == ("balanced" if name.endswith("_cpu") else "fixed"), name
