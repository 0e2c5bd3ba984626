"""A real chat-completions HTTP server on loopback that answers from a script, for tests and for the report's
"LLM path on the scripted server" section (no model is reachable from where this project is built).

Each request gets the next :class:`Reply` of the script, or, when the script is a function, whatever it returns
for the request's JSON body. A reply can be a completion, an HTTP error (with Retry-After), a body that is not a
chat completion, or a delay that outlasts the client's timeout::

    with ScriptedServer([Reply(status=429), Reply("```asm\\n...\\n```")]) as server:
        settings = LLMSettings(base_url=server.base_url, retries=2, backoff=0)
        ...
        server.requests   # the JSON bodies received, in order
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Iterable, List, Optional, Union


@dataclasses.dataclass(frozen=True)
class Reply:
    """One scripted answer: ``content`` as a chat completion (status 200), or ``status`` (429, 500, ...) with
    ``retry_after`` seconds, or ``raw`` bytes sent as the body as they are; ``delay`` seconds before answering."""

    content: Optional[str] = None
    status: int = 200
    raw: Optional[bytes] = None
    delay: float = 0.0
    retry_after: Optional[float] = None


Script = Union[Iterable[Reply], Callable[[Dict], Reply]]


class ScriptedServer:
    """Serves ``POST /v1/chat/completions`` on 127.0.0.1 at an ephemeral port. Use as a context manager.

    ``base_url`` is what :class:`~behavioral_pq.lowering.llm.LLMSettings` needs. When a list script runs out,
    the server answers HTTP 500 "script exhausted" (a test that expected fewer calls then fails loudly)."""

    def __init__(self, script: Script, *, model: str = "scripted"):
        self.model = model
        self.requests: List[Dict] = []
        self._lock = threading.Lock()
        if callable(script):
            self._respond = script
        else:
            replies = list(script)
            self._respond = lambda body: replies.pop(0) if replies else Reply(status=500, raw=b"script exhausted")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-llm", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: tests read server.requests instead
                pass

            def do_POST(self):
                if not self.path.endswith("/chat/completions"):
                    self._send(404, b'{"error": "not found"}')
                    return
                length = int(self.headers.get("Content-Length", 0))
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    self._send(400, b'{"error": "bad json"}')
                    return
                with server._lock:
                    server.requests.append(body)
                    reply = server._respond(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.raw is not None:
                    self._send(reply.status, reply.raw)
                elif reply.status != 200:
                    headers = {"Retry-After": f"{reply.retry_after:g}"} if reply.retry_after is not None else {}
                    self._send(reply.status, json.dumps({"error": {"message": f"scripted {reply.status}"}}).encode(),
                               headers)
                else:
                    self._send(200, json.dumps({
                        "id": f"scripted-{len(server.requests)}", "object": "chat.completion", "model": server.model,
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply.content or ""}}],
                        "usage": {"prompt_tokens": sum(len(m.get("content", "")) // 4 for m in body["messages"]),
                                  "completion_tokens": len(reply.content or "") // 4}}).encode())

            def _send(self, status: int, payload: bytes, headers: Optional[Dict[str, str]] = None):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout); nothing to do
                    pass

        return Handler
