"""A :class:`g2po_bench.runtime.policy_protocol.Policy` over any OpenAI-compatible chat-completions endpoint.

Works with the OpenAI API, vLLM's ``vllm serve``, SGLang, llama.cpp's server, LiteLLM and
the like: ``POST {base_url}/chat/completions`` with one user message per prompt (plus an
optional system message). Uses ``httpx`` only.

Failure handling:

- HTTP 429 and 5xx, connection errors and timeouts are retried with exponential backoff
  (``backoff_base * 2**attempt`` seconds, capped at ``backoff_max``, with up to 25 % jitter);
  a ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms`` header overrides the backoff
  (capped at ``max_retry_after``). After ``max_retries`` retries the last failure is raised
  as :class:`PolicyRateLimitError`, :class:`PolicyServerError`, :class:`PolicyTimeoutError`
  or :class:`PolicyConnectionError` (an unreachable server), each naming the URL.
- HTTP 401/403 raise :class:`PolicyAuthError` at once, naming the environment variable the
  key is read from (and saying when it was not set).
- Other 4xx (unknown model, bad parameter) and malformed replies raise
  :class:`PolicyRequestError` at once with the server's message.

Sampling: ``temperature``, ``top_p``, ``max_tokens`` and ``seed`` are sent with every request;
request ``i`` of a :meth:`OpenAIPolicy.generate` call carries seed ``seed + i`` (so identical
prompts in one batch are sampled independently, and the same call is reproducible where the
server honours seeds). Each :class:`~g2po_bench.runtime.policy_protocol.Generation` records the seed, the
finish reason, the token usage, the attempts and the latency in ``info``; remote policies
expose no token ids (``prompt_ids``/``response_ids`` are empty).
"""

from __future__ import annotations

import email.utils
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from g2po_bench.runtime.policy_protocol import Generation

__all__ = [
    "OpenAIPolicy",
    "PolicyError",
    "PolicyAuthError",
    "PolicyConnectionError",
    "PolicyTimeoutError",
    "PolicyServerError",
    "PolicyRateLimitError",
    "PolicyRequestError",
]

#: HTTP status codes that are retried (rate limits and server-side failures).
RETRY_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))


class PolicyError(RuntimeError):
    """A remote policy could not produce a response."""


class PolicyAuthError(PolicyError):
    """The server rejected the API key (HTTP 401/403). Not retried."""


class PolicyConnectionError(PolicyError):
    """The server could not be reached (after all retries)."""


class PolicyTimeoutError(PolicyConnectionError):
    """Requests kept timing out (after all retries)."""


class PolicyServerError(PolicyError):
    """The server kept answering 5xx (after all retries)."""


class PolicyRateLimitError(PolicyServerError):
    """The server kept answering 429 Too Many Requests (after all retries)."""


class PolicyRequestError(PolicyError):
    """The server refused the request (4xx other than 401/403/429) or sent a malformed reply."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def parse_retry_after(headers: httpx.Headers | dict[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date);
    None when absent or unparseable. Never negative."""
    h = {k.lower(): v for k, v in dict(headers).items()}
    ms = h.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = h.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _server_message(resp: httpx.Response) -> str:
    """The error message of a JSON error body (``{"error": {"message": ...}}``) or the raw text."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:300]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return str(body)[:300]


class OpenAIPolicy:
    """A :class:`g2po_bench.runtime.policy_protocol.Policy` over an OpenAI-compatible chat-completions endpoint.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``;
            requests go to ``{base_url}/chat/completions``.
        model: the model name sent with every request.
        api_key_env: environment variable holding the API key (read when the policy is built);
            ``None``/``""`` sends no key. An unset variable sends no key either (local servers
            need none); a server that then answers 401/403 gets a :class:`PolicyAuthError`
            saying the variable was not set.
        timeout: seconds to wait for a reply (read timeout); ``connect_timeout`` for connecting.
        max_retries: retries after the first attempt (0 = no retry).
        backoff_base, backoff_max: exponential backoff in seconds (see the module docstring).
        max_retry_after: cap on a server's ``Retry-After`` in seconds.
        max_concurrency: requests in flight at once for one ``generate`` call.
        stop: stop strings sent with every request (the server drops them from the text).
        system_prompt: an optional system message put before each prompt.
        extra_body: extra JSON fields merged into every request (e.g. ``{"top_k": 20}``).
        transport, sleep: injection points for tests (an ``httpx`` transport; the sleep function).
    """

    kind = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        max_retry_after: float = 120.0,
        max_concurrency: int = 8,
        stop: list[str] | None = None,
        system_prompt: str | None = None,
        extra_body: dict[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if not base_url:
            raise ValueError("OpenAIPolicy needs base_url, e.g. http://127.0.0.1:8000/v1")
        if not model:
            raise ValueError("OpenAIPolicy needs a model name")
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0:
            raise ValueError("max_retries must be >= 0, max_concurrency >= 1 and timeout > 0")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.api_key_env = api_key_env or None
        self._api_key = os.environ.get(self.api_key_env) if self.api_key_env else None
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_retry_after = float(max_retry_after)
        self.max_concurrency = int(max_concurrency)
        self.stop = list(stop) if stop else None
        self.system_prompt = system_prompt
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._rng = random.Random(0)
        self._rng_lock = threading.Lock()
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            transport=transport,
            limits=httpx.Limits(max_connections=self.max_concurrency,
                                max_keepalive_connections=self.max_concurrency),
        )
        #: retries done so far (all calls), for logs and tests
        self.retries = 0

    # ------------------------------------------------------------------ description
    def describe(self) -> dict[str, Any]:
        """The settings of this policy for the run folder (never the key itself)."""
        return {
            "kind": self.kind, "base_url": self.base_url, "model": self.model,
            "api_key_env": self.api_key_env, "api_key_set": self._api_key is not None,
            "timeout": self.timeout, "connect_timeout": self.connect_timeout,
            "max_retries": self.max_retries, "backoff_base": self.backoff_base,
            "backoff_max": self.backoff_max, "max_concurrency": self.max_concurrency,
            "stop": self.stop, "system_prompt": self.system_prompt, "extra_body": self.extra_body,
            "seed_rule": "request i of a generate call gets seed + i",
        }

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def request_body(self, prompt: str, *, temperature: float, max_new_tokens: int, top_p: float,
                     seed: int | None) -> dict[str, Any]:
        """The JSON body sent for one prompt."""
        messages = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {
            "model": self.model, "messages": messages, "temperature": float(temperature),
            "top_p": float(top_p), "max_tokens": int(max_new_tokens), "n": 1,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if self.stop:
            body["stop"] = list(self.stop)
        body.update(self.extra_body)
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        base = min(self.backoff_max, self.backoff_base * (2 ** attempt))
        with self._rng_lock:
            jitter = self._rng.random() * 0.25
        return base * (1.0 + jitter)

    def _auth_error(self, resp: httpx.Response) -> PolicyAuthError:
        msg = _server_message(resp)
        if self.api_key_env is None:
            hint = "no API key was sent (api_key_env is empty); set api_key_env to the variable holding the key"
        elif self._api_key is None:
            hint = f"no API key was sent: ${self.api_key_env} is not set; export it with a valid key"
        else:
            hint = f"the key in ${self.api_key_env} was rejected; check that it is valid for this server"
        return PolicyAuthError(f"{self.url} answered HTTP {resp.status_code} ({msg}): {hint}")

    def _post(self, body: dict[str, Any]) -> tuple[dict[str, Any], int, float]:
        """POST one request with retries; returns (JSON reply, attempts, seconds)."""
        start = time.perf_counter()
        last: tuple[str, str] = ("connection", "")
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                resp = self._client.post(self.url, json=body, headers=self._headers())
            except httpx.TimeoutException as exc:
                last = ("timeout", f"{type(exc).__name__}: {exc}")
            except httpx.TransportError as exc:
                last = ("connection", f"{type(exc).__name__}: {exc}")
            else:
                if resp.status_code == 200:
                    try:
                        data = resp.json()
                    except ValueError:
                        raise PolicyRequestError(
                            f"{self.url} sent a reply that is not JSON: {resp.text[:200]!r}", 200) from None
                    return data, attempt + 1, time.perf_counter() - start
                if resp.status_code in (401, 403):
                    raise self._auth_error(resp)
                if resp.status_code not in RETRY_STATUS:
                    raise PolicyRequestError(
                        f"{self.url} refused the request with HTTP {resp.status_code}: "
                        f"{_server_message(resp)} (model={self.model!r})", resp.status_code)
                retry_after = parse_retry_after(resp.headers)
                kind = "rate_limit" if resp.status_code == 429 else "server"
                last = (kind, f"HTTP {resp.status_code}: {_server_message(resp)}")
            if attempt < self.max_retries:
                with self._rng_lock:
                    self.retries += 1
                self._sleep(self._delay(attempt, retry_after))
        tries = self.max_retries + 1
        kind, detail = last
        if kind == "timeout":
            raise PolicyTimeoutError(
                f"{self.url} did not answer within {self.timeout:g} s in {tries} attempt(s) ({detail}); "
                "raise the timeout or check the server's load")
        if kind == "connection":
            raise PolicyConnectionError(
                f"cannot reach the server at {self.url} after {tries} attempt(s) ({detail}); "
                "check that it is running and that base_url is right")
        if kind == "rate_limit":
            raise PolicyRateLimitError(
                f"{self.url} kept rate-limiting after {tries} attempt(s) ({detail}); "
                "lower max_concurrency or raise max_retries/backoff")
        raise PolicyServerError(f"{self.url} kept failing after {tries} attempt(s) ({detail})")

    def _one(self, prompt: str, temperature: float, max_new_tokens: int, top_p: float,
             seed: int | None) -> Generation:
        body = self.request_body(prompt, temperature=temperature, max_new_tokens=max_new_tokens,
                                 top_p=top_p, seed=seed)
        data, attempts, latency = self._post(body)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise PolicyRequestError(f"{self.url} sent a reply without choices[0].message: {str(data)[:200]}",
                                     200) from None
        usage = data.get("usage") or {}
        info = {
            "finish_reason": choice.get("finish_reason"),
            "finished": choice.get("finish_reason") == "stop",
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "seed": seed, "attempts": attempts, "latency_s": round(latency, 4),
            "model": data.get("model", self.model),
        }
        return Generation(text=text, prompt_ids=[], response_ids=[], info=info)

    def generate(self, prompts: list[str], *, temperature: float, max_new_tokens: int,
                 top_p: float = 1.0, seed: int | None = None) -> list[Generation]:
        """Sample one response per prompt (see :class:`g2po_bench.runtime.policy_protocol.Policy`); requests run
        ``max_concurrency`` at a time and the answers keep the order of ``prompts``.

        Raises:
            PolicyError (a subclass naming the cause) when a request fails for good.
        """
        if not prompts:
            return []
        seeds = [None if seed is None else seed + i for i in range(len(prompts))]
        if len(prompts) == 1 or self.max_concurrency == 1:
            return [self._one(p, temperature, max_new_tokens, top_p, s) for p, s in zip(prompts, seeds)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            futures = [pool.submit(self._one, p, temperature, max_new_tokens, top_p, s)
                       for p, s in zip(prompts, seeds)]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
