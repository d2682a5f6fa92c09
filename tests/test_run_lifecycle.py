"""RunLifecycle.failing_on_error: the failure record both trainer backends wrap their run in."""

import signal

import pytest

from g2po_bench.algorithms.backends.lifecycle import RunLifecycle
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.shutdown import ShutdownRequested


def _lifecycle(tmp_path) -> RunLifecycle:
    cfg = load_config(overrides=[f"output_dir={tmp_path}", "run_id=r", "progress=false", "env.name=toy"])
    lc = RunLifecycle(cfg, backend="local")
    lc.start()
    return lc


def test_an_error_marks_the_run_failed_with_the_error_and_goes_on(tmp_path):
    lc = _lifecycle(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        with lc.failing_on_error():
            raise RuntimeError("boom")
    status = lc.run.read_status()
    assert status["state"] == "failed"
    assert status["error"] == "RuntimeError: boom"


def test_a_stop_request_is_not_a_failure(tmp_path):
    lc = _lifecycle(tmp_path)
    with pytest.raises(ShutdownRequested):
        with lc.failing_on_error():
            raise ShutdownRequested(signal.SIGTERM)
    assert lc.run.read_status()["state"] == "running"


def test_a_body_that_ends_leaves_the_status_alone(tmp_path):
    lc = _lifecycle(tmp_path)
    with lc.failing_on_error():
        pass
    assert lc.run.read_status()["state"] == "running"
