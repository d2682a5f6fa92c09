"""OpenAIPolicy against a local OpenAI-compatible server started by the test (127.0.0.1).

The server is a ``http.server.ThreadingHTTPServer`` in a thread: it records every request
and answers from a script (status codes, headers, delays) so the retry, timeout, rate-limit
and authentication paths are exercised over real HTTP.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from g2po_bench.runtime.policies import (
    MeteredPolicy,
    OpenAIPolicy,
    PolicyAuthError,
    PolicyConnectionError,
    PolicyRateLimitError,
    PolicyRequestError,
    PolicyServerError,
    PolicyTimeoutError,
)
from g2po_bench.runtime.policies.openai import parse_retry_after
from g2po_bench.runtime.policy_protocol import Policy


class FakeServer:
    """An OpenAI-compatible chat-completions server with a scripted failure sequence.

    ``script``: list of actions served in order, then ``"ok"`` forever. An action is
    ``"ok"``, ``("status", code, headers_dict)`` or ``("sleep", seconds)`` (then answers ok).
    ``api_key``: when set, requests without ``Authorization: Bearer <api_key>`` get 401.
    ``reply``: function(request_body) -> assistant text.
    """

    def __init__(self, script=None, api_key=None, reply=None):
        self.script = list(script or [])
        self.api_key = api_key
        self.reply = reply or (lambda body: "echo: " + body["messages"][-1]["content"])
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                with server.lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers),
                                            "body": json.loads(raw)})
                    action = server.script.pop(0) if server.script else "ok"
                if server.api_key is not None and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                if isinstance(action, tuple) and action[0] == "status":
                    _, code, headers = action
                    return self._send(code, {"error": {"message": f"scripted {code}"}}, headers)
                if isinstance(action, tuple) and action[0] == "sleep":
                    time.sleep(action[1])
                body = json.loads(raw)
                text = server.reply(body)
                return self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": len(body["messages"][-1]["content"].split()),
                              "completion_tokens": len(text.split()),
                              "total_tokens": 0},
                })

            def _send(self, code, obj, headers=None):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class Sleeps(list):
    """A recording stand-in for ``time.sleep``."""

    def __call__(self, seconds):
        self.append(seconds)


def make(server, **kw):
    kw.setdefault("api_key_env", "G2PO_TEST_KEY")
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("backoff_base", 0.01)
    kw.setdefault("max_retries", 3)
    kw.setdefault("timeout", 5.0)
    return OpenAIPolicy(server.base_url, "test-model", **kw)


def test_request_format_and_answers(monkeypatch):
    monkeypatch.setenv("G2PO_TEST_KEY", "sk-good")
    with FakeServer(api_key="sk-good") as srv:
        pol = make(srv, stop=["</action>"], system_prompt="You are an agent.", max_concurrency=4)
        assert isinstance(pol, Policy)
        prompts = [f"prompt number {i}" for i in range(6)]
        gens = pol.generate(prompts, temperature=0.4, max_new_tokens=32, top_p=0.9, seed=100)
        pol.close()
    assert [g.text for g in gens] == [f"echo: {p}" for p in prompts]  # order kept under concurrency
    assert len(srv.requests) == 6
    for req in srv.requests:
        assert req["path"] == "/v1/chat/completions"
        assert req["headers"]["Authorization"] == "Bearer sk-good"
        assert req["headers"]["Content-Type"].startswith("application/json")
        body = req["body"]
        assert body["model"] == "test-model"
        assert body["messages"][0] == {"role": "system", "content": "You are an agent."}
        assert body["messages"][1]["role"] == "user"
        assert body["temperature"] == 0.4 and body["top_p"] == 0.9
        assert body["max_tokens"] == 32 and body["n"] == 1
        assert body["stop"] == ["</action>"]
    seeds = {r["body"]["messages"][1]["content"]: r["body"]["seed"] for r in srv.requests}
    assert seeds == {f"prompt number {i}": 100 + i for i in range(6)}
    g = gens[2]
    assert g.prompt_ids == [] and g.response_ids == []
    assert g.info["seed"] == 102 and g.info["finish_reason"] == "stop" and g.info["attempts"] == 1
    assert g.info["completion_tokens"] == 4 and g.info["prompt_tokens"] == 3
    json.dumps(g.info)  # JSON-serialisable
    d = pol.describe()
    assert d["api_key_set"] and "sk-good" not in json.dumps(d)


def test_no_seed_and_no_key(monkeypatch):
    monkeypatch.delenv("G2PO_TEST_KEY", raising=False)
    with FakeServer() as srv:
        gens = make(srv).generate(["hi"], temperature=0.0, max_new_tokens=4)
    assert gens[0].text == "echo: hi"
    body = srv.requests[0]["body"]
    assert "seed" not in body and "stop" not in body
    assert "Authorization" not in srv.requests[0]["headers"]


def test_retries_on_429_respecting_retry_after():
    script = [("status", 429, {"Retry-After": "2"}), ("status", 429, {"retry-after-ms": "1500"}), "ok"]
    with FakeServer(script) as srv:
        sleeps = Sleeps()
        pol = make(srv, sleep=sleeps)
        gens = pol.generate(["x"], temperature=1.0, max_new_tokens=4, seed=1)
    assert gens[0].text == "echo: x" and gens[0].info["attempts"] == 3
    assert len(srv.requests) == 3 and pol.retries == 2
    assert sleeps == [2.0, 1.5]  # the server's Retry-After wins over the backoff


def test_retry_after_is_capped():
    with FakeServer([("status", 503, {"Retry-After": "3600"})]) as srv:
        sleeps = Sleeps()
        make(srv, sleep=sleeps, max_retry_after=5.0).generate(["x"], temperature=1.0, max_new_tokens=4)
    assert sleeps == [5.0]


def test_retries_on_5xx_with_exponential_backoff():
    script = [("status", 500, {}), ("status", 502, {}), ("status", 503, {}), "ok"]
    with FakeServer(script) as srv:
        sleeps = Sleeps()
        gens = make(srv, sleep=sleeps, backoff_base=0.1).generate(["y"], temperature=1.0, max_new_tokens=4)
    assert gens[0].info["attempts"] == 4
    assert len(sleeps) == 3
    for k, s in enumerate(sleeps):  # 0.1 * 2**k with at most 25 % jitter
        assert 0.1 * 2**k <= s <= 0.1 * 2**k * 1.25 + 1e-9


def test_persistent_failures_raise_after_the_retry_budget():
    with FakeServer([("status", 503, {})] * 10) as srv:
        with pytest.raises(PolicyServerError, match=r"HTTP 503.*|after 3 attempt") as info:
            make(srv, max_retries=2).generate(["z"], temperature=1.0, max_new_tokens=4)
    assert not isinstance(info.value, PolicyRateLimitError)
    assert len(srv.requests) == 3
    with FakeServer([("status", 429, {})] * 10) as srv:
        with pytest.raises(PolicyRateLimitError, match="rate-limiting"):
            make(srv, max_retries=1).generate(["z"], temperature=1.0, max_new_tokens=4)
    assert len(srv.requests) == 2


def test_timeouts_are_retried_then_reported():
    with FakeServer([("sleep", 1.0)]) as srv:  # first request too slow, second fine
        sleeps = Sleeps()
        gens = make(srv, sleep=sleeps, timeout=0.25).generate(["t"], temperature=1.0, max_new_tokens=4)
        assert gens[0].text == "echo: t" and gens[0].info["attempts"] == 2
        assert len(sleeps) == 1
    with FakeServer([("sleep", 1.0)] * 5) as srv:
        t0 = time.perf_counter()
        with pytest.raises(PolicyTimeoutError, match="did not answer within 0.25 s in 2 attempt"):
            make(srv, timeout=0.25, max_retries=1).generate(["t"], temperature=1.0, max_new_tokens=4)
        assert time.perf_counter() - t0 < 3.0


@pytest.mark.parametrize("code", [401, 403])
def test_bad_key_is_a_clear_error_and_not_retried(monkeypatch, code):
    monkeypatch.setenv("G2PO_TEST_KEY", "sk-wrong")
    with FakeServer([("status", code, {})]) as srv:
        with pytest.raises(PolicyAuthError) as info:
            make(srv).generate(["k"], temperature=1.0, max_new_tokens=4)
    msg = str(info.value)
    assert f"HTTP {code}" in msg and "$G2PO_TEST_KEY" in msg and "rejected" in msg
    assert "sk-wrong" not in msg
    assert len(srv.requests) == 1


def test_wrong_and_missing_key(monkeypatch):
    monkeypatch.setenv("G2PO_TEST_KEY", "sk-wrong")
    with FakeServer(api_key="sk-good") as srv:
        with pytest.raises(PolicyAuthError, match="Incorrect API key"):
            make(srv).generate(["k"], temperature=1.0, max_new_tokens=4)
        monkeypatch.delenv("G2PO_TEST_KEY")
        with pytest.raises(PolicyAuthError, match=r"\$G2PO_TEST_KEY is not set"):
            make(srv).generate(["k"], temperature=1.0, max_new_tokens=4)


def test_unreachable_server():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    pol = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, backoff_base=0.01, sleep=sleeps)
    with pytest.raises(PolicyConnectionError, match=r"cannot reach the server at http://127.0.0.1:\d+/v1/chat/completions after 3 attempt"):
        pol.generate(["u"], temperature=1.0, max_new_tokens=4)
    assert len(sleeps) == 2


def test_client_errors_are_not_retried():
    with FakeServer([("status", 404, {})]) as srv:
        with pytest.raises(PolicyRequestError, match="HTTP 404: scripted 404") as info:
            make(srv).generate(["n"], temperature=1.0, max_new_tokens=4)
    assert info.value.status == 404 and len(srv.requests) == 1


def test_parse_retry_after():
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({}) is None
    assert parse_retry_after({"Retry-After": "soon"}) is None
    date = "Wed, 21 Oct 2015 07:28:30 GMT"
    import email.utils

    now = email.utils.parsedate_to_datetime(date).timestamp() - 12
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(12.0)
    assert parse_retry_after({"Retry-After": date}) == 0.0  # in the past


def test_metered_policy_counts_server_usage():
    with FakeServer() as srv:
        pol = MeteredPolicy(make(srv))
        pol.generate(["a b c", "d e"], temperature=0.0, max_new_tokens=8, seed=3)
    st = pol.stats()
    assert st["calls"] == 1 and st["prompts"] == 2
    assert st["prompt_tokens"] == 5 and st["response_tokens"] == 4 + 3
    assert st["response_tokens_per_second"] > 0
    assert pol.calls[0]["seed"] == 3 and pol.calls[0]["temperature"] == 0.0
    assert pol.describe()["kind"] == "openai"


def test_rollouts_through_the_http_policy():
    from g2po_bench.benchmarks.registry import get_benchmark
    from g2po_bench.benchmarks.rollout import collect_rollouts
    from g2po_bench.runtime.workers import EnvPool

    toy = get_benchmark("toy")
    tasks = toy.load_tasks(None, "valid")[:2]
    with FakeServer(reply=lambda body: "<think>east</think><action>go east</action>") as srv:
        with EnvPool(get_benchmark("toy"), None, 1) as pool:
            rb = collect_rollouts(make(srv), pool, toy, tasks, group_size=2, max_steps=8,
                                  temperature=0.4, max_new_tokens=16, seed=0)
    assert rb.success_rate == 1.0
    assert rb.prompt_ids[0] == [] and rb.responses[0].startswith("<think>")
