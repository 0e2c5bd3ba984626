"""The one wrapper around an LLM endpoint: the OpenAI-compatible chat-completions HTTP API (vLLM, llama.cpp
server, Ollama, hosted services), with a total deadline per request and retries on 429, 5xx and timeouts.

The client trusts nothing the endpoint sends: each request has one deadline for connecting, sending and reading
the whole answer (a slow drip cannot stretch it), answers larger than ``max_response_bytes`` are refused,
redirects are never followed (so the API key never reaches another host), and TLS certificates are verified.

Nothing touches the network unless an endpoint is configured, in a TOML file (``[llm]`` table) or in the
environment::

    BPQ_LLM_BASE_URL   e.g. http://127.0.0.1:8000/v1   (OPENAI_BASE_URL is read too)
    BPQ_LLM_MODEL      model name sent with each request
    BPQ_LLM_API_KEY    sent as a Bearer token (OPENAI_API_KEY is read too); never logged
    BPQ_LLM_TIMEOUT    seconds per request (default 120)
    BPQ_LLM_RETRIES    retries after the first try (default 3)
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import math
import os
import socket
import ssl
import time
import urllib.parse
from typing import Dict, List, Optional, Sequence, Union

from behavioral_pq.config import from_dict, load_toml
from behavioral_pq.errors import LLMError, LLMNotConfiguredError, LLMResponseError, LLMTimeoutError

logger = logging.getLogger(__name__)

#: HTTP statuses worth another try: rate limits and server-side failures.
RETRY_STATUSES = (408, 409, 425, 429, 500, 502, 503, 504)
MAX_RETRY_AFTER = 60.0


@dataclasses.dataclass(frozen=True)
class LLMSettings:
    """Where and how to reach a chat-completions endpoint. ``base_url`` ends before ``/chat/completions``."""

    base_url: str
    model: str = "default"
    api_key: str = dataclasses.field(default="", repr=False)
    timeout: float = 120.0
    retries: int = 3
    backoff: float = 1.0
    temperature: float = 0.2
    max_tokens: int = 4096
    max_response_bytes: int = 8 << 20

    def __post_init__(self):
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"LLM base_url must start with http:// or https://, got {self.base_url!r}")
        if not (math.isfinite(self.timeout) and math.isfinite(self.backoff)):
            raise ValueError(f"LLM timeout and backoff must be finite numbers of seconds, got {self.timeout} and "
                             f"{self.backoff}")
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0 or self.max_response_bytes <= 0:
            raise ValueError("LLM timeout and max_response_bytes must be positive, retries and backoff "
                             "non-negative")


def load_llm_settings(path: Union[str, os.PathLike, None] = None, **overrides) -> LLMSettings:
    """Settings from a TOML file's ``[llm]`` table, else from the environment; keyword overrides win.

    Raises LLMError when no endpoint is configured anywhere (the library never guesses one)."""
    values: Dict = {}
    if path is not None:
        data = load_toml(path)
        values.update(data.get("llm", data))
    else:
        env = os.environ
        for key, names in (("base_url", ("BPQ_LLM_BASE_URL", "OPENAI_BASE_URL")), ("model", ("BPQ_LLM_MODEL",)),
                           ("api_key", ("BPQ_LLM_API_KEY", "OPENAI_API_KEY")), ("timeout", ("BPQ_LLM_TIMEOUT",)),
                           ("retries", ("BPQ_LLM_RETRIES",))):
            for name in names:
                if env.get(name):
                    values[key] = env[name]
                    break
        if "timeout" in values:
            values["timeout"] = _number_from_environment("BPQ_LLM_TIMEOUT", values["timeout"], float)
        if "retries" in values:
            values["retries"] = _number_from_environment("BPQ_LLM_RETRIES", values["retries"], int)
    values.update({k: v for k, v in overrides.items() if v is not None})
    if not values.get("base_url"):
        raise LLMNotConfiguredError("no LLM endpoint configured: set BPQ_LLM_BASE_URL (and BPQ_LLM_MODEL, "
                                    "BPQ_LLM_API_KEY) or pass a settings file with an [llm] table")
    return from_dict(LLMSettings, values, where=str(path) if path else "LLM settings")


@dataclasses.dataclass(frozen=True)
class Completion:
    """One answer: the message ``content``, the ``model`` that produced it, ``tries`` (1 + retries used),
    wall ``seconds`` including retries, and the endpoint's token ``usage`` when it reports one."""

    content: str
    model: str
    tries: int
    seconds: float
    usage: Dict = dataclasses.field(default_factory=dict)


class ChatClient:
    """Sends chat messages to the configured endpoint. Thread-safe; counts requests in ``requests_sent``."""

    def __init__(self, settings: LLMSettings, *, sleep=time.sleep):
        self.settings = settings
        self.requests_sent = 0
        self._sleep = sleep

    @property
    def url(self) -> str:
        return self.settings.base_url.rstrip("/") + "/chat/completions"

    def complete(self, messages: Sequence[Dict[str, str]], *, temperature: Optional[float] = None) -> Completion:
        """POST the messages; retry on :data:`RETRY_STATUSES`, timeouts and refused connections with exponential
        backoff (honouring Retry-After, waited at most ``settings.timeout``), at most ``settings.retries`` times.

        Raises LLMTimeoutError (every try timed out), LLMError (HTTP error, unreachable), LLMResponseError
        (an answer that is not a chat completion; not retried)."""
        s = self.settings
        body = json.dumps({"model": s.model, "messages": list(messages), "max_tokens": s.max_tokens,
                           "temperature": s.temperature if temperature is None else temperature}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if s.api_key:
            headers["Authorization"] = f"Bearer {s.api_key}"
        start, last_error = time.monotonic(), None
        for attempt in range(s.retries + 1):
            if attempt:
                retry_after = last_error[1] if last_error else None
                # the endpoint's Retry-After is waited at most as long as a request may take
                delay = (min(retry_after, s.timeout) if retry_after is not None
                         else s.backoff * 2 ** (attempt - 1))
                delay = min(delay, MAX_RETRY_AFTER)
                logger.info("LLM request failed (%s); retry %d/%d in %.1f s", last_error[0], attempt, s.retries, delay)
                self._sleep(delay)
            self.requests_sent += 1
            try:
                status, reason, response_headers, raw = _post(self.url, body, headers, s.timeout,
                                                               s.max_response_bytes)
            except (socket.timeout, TimeoutError):
                last_error = (f"timed out after {s.timeout:g} s", None)
                continue
            except (ConnectionError, OSError, http.client.HTTPException) as exc:
                last_error = (f"connection failed: {exc}", None)
                continue
            if 300 <= status < 400:
                raise LLMError(f"{self.url}: HTTP {status} redirect to {response_headers.get('Location')!r} not "
                               "followed (the API key is only ever sent to the configured endpoint)")
            if status >= 400:
                detail = raw[:500].decode(errors="replace")
                if status not in RETRY_STATUSES:
                    raise LLMError(f"{self.url}: HTTP {status} {reason}: {detail}")
                last_error = (f"HTTP {status}: {detail[:200]}", _retry_after(response_headers.get("Retry-After")))
                continue
            return _parse_completion(raw, self.url, attempt + 1, time.monotonic() - start)
        message = f"{self.url}: {last_error[0]} (tried {s.retries + 1} times)"
        if last_error[0].startswith("timed out"):
            raise LLMTimeoutError(message)
        raise LLMError(message)


def _post(url: str, body: bytes, headers: Dict[str, str], timeout: float, max_bytes: int):
    """POST ``body``: (status, reason, headers, answer bytes), all within ``timeout`` seconds in total.

    Raises TimeoutError past the deadline, LLMResponseError for an answer over ``max_bytes``, OSError or
    http.client.HTTPException when the connection fails. Redirects are returned, never followed."""
    parts = urllib.parse.urlsplit(url)
    deadline = time.monotonic() + timeout

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete answer within {timeout:g} s")
        return remaining

    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=left(),
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=left())
    try:
        conn.connect()
        sock = conn.sock
        sock.settimeout(left())
        conn.request("POST", parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers)
        sock.settimeout(left())
        response = conn.getresponse()
        chunks, size = [], 0
        while True:
            sock.settimeout(left())
            chunk = response.read1(1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise LLMResponseError(f"{url}: the answer is larger than {max_bytes:,} bytes; refused")
            chunks.append(chunk)
        return response.status, response.reason, response.headers, b"".join(chunks)
    finally:
        conn.close()


def _number_from_environment(name: str, text: str, kind):
    """``text``, the value of the environment variable ``name``: a whole number >= 0 (``kind`` int) or a positive
    finite number of seconds (``kind`` float)."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < 0 or (kind is float and value == 0):
        what = "a whole number >= 0" if kind is int else "a positive, finite number of seconds"
        raise ValueError(f"{name} must be {what}, got {text!r}")
    return value


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _parse_completion(raw: bytes, url: str, tries: int, seconds: float) -> Completion:
    try:
        data = json.loads(raw)
        message = data["choices"][0]["message"]
        content = message.get("content")
    except RecursionError:
        raise LLMResponseError(f"{url}: not a chat completion: JSON nested too deeply to read") from None
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise LLMResponseError(f"{url}: not a chat completion: {raw[:300].decode(errors='replace')!r}") from None
    if not isinstance(content, str):
        raise LLMResponseError(f"{url}: the completion has no text content")
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        logger.info("%s: ignoring a token usage that is not a JSON object: %.100r", url, usage)
    model = data.get("model")
    return Completion(content, model if isinstance(model, str) else "", tries, seconds,
                      dict(usage) if isinstance(usage, dict) else {})


def user(text: str) -> Dict[str, str]:
    return {"role": "user", "content": text}


def system(text: str) -> Dict[str, str]:
    return {"role": "system", "content": text}


def assistant(text: str) -> Dict[str, str]:
    return {"role": "assistant", "content": text}


Messages = List[Dict[str, str]]
