"""The ALFWorld downloader wrapper: uses alfworld's own script, fails offline with a clear error."""

from __future__ import annotations

import pytest

from g2po_bench.benchmarks.alfworld.download import (
    DataDownloadError,
    download_alfworld,
    load_downloader,
)


def test_uses_the_package_downloader():
    script = load_downloader()
    assert callable(script.download) and callable(script.unzip)
    assert script.JSON_FILES_URL.endswith(".zip") and script.TW_PDDL_FILES_URL.endswith(".zip")


def test_unreachable_server_raises_a_clear_error(tmp_path):
    url = "http://127.0.0.1:9/json_2.1.1_json.zip"  # discard port: connection refused at once
    with pytest.raises(DataDownloadError) as info:
        download_alfworld(tmp_path / "alfworld", urls=[url], timeout=5)
    msg = str(info.value)
    assert url in msg and "env.data_dir" in msg and "json_2.1.1" in msg


def test_nothing_happens_at_import_or_construction(tmp_path, monkeypatch):
    import g2po_bench.benchmarks.alfworld as alf
    from g2po_bench.core.config import EnvConfig

    env = alf.make_env(EnvConfig(data_dir=str(tmp_path)))
    assert env.name == "alfworld"
    assert not any(tmp_path.iterdir())
