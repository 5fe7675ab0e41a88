"""The hub client's deadline and its last answer, so that publishing never waits forever and
a failure says what was asked of which endpoint and what came back.

huggingface_hub's shared client (`get_session()`, an httpx2.Client) has no timeout: a hub
that accepts the connection and never answers held `epcap publish` silently for minutes.
`use_deadlines` gives every request HUB_TIMEOUT_S to connect, send a block and hear back, and
records each response, which `describe` shows (status, content type, first bytes, escaped)
when an answer was not the hub's JSON (a captive portal's HTML page, a proxy's error).
"""

from __future__ import annotations

from typing import Any

from harness.io.redact import redact_text

# Seconds one request may wait to connect, to send one block or to hear back: the default of
# huggingface_hub's own per-request deadlines (HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT).
# A stall, not a total: a large upload that keeps moving is never cut.
HUB_TIMEOUT_S = 10.0
SHOWN_BYTES = 60        # of an answer that was not the hub's JSON

_last: list = [None]    # the last response the client received (its hook writes it)


class HubUnanswered(Exception):
    """The hub did not answer a request in time, or the connection failed mid-way."""


def endpoint() -> str:
    """The hub's base URL (HF_ENDPOINT, else huggingface.co), credentials redacted."""
    from huggingface_hub import constants  # lazy: only publishing needs the hub
    return redact_text(str(constants.ENDPOINT))


def use_deadlines() -> None:
    """Give the shared hub client's every request a deadline (a request hook: huggingface_hub
    passes `timeout=None` explicitly to some calls, `repo_info` among them, which would
    override a client default) and the hook that records its answers; idempotent."""
    from huggingface_hub import get_session  # lazy: only publishing needs the hub
    client = get_session()
    hooks = client.event_hooks
    if _record not in hooks["response"]:
        client.event_hooks = {"request": [*hooks["request"], _deadline],
                              "response": [*hooks["response"], _record]}


def _deadline(request: Any) -> None:
    """Each phase of `request` (connect, write, read, pool) waits at most HUB_TIMEOUT_S."""
    asked = request.extensions.get("timeout") or {}
    request.extensions["timeout"] = {
        phase: HUB_TIMEOUT_S if asked.get(phase) is None else min(asked[phase], HUB_TIMEOUT_S)
        for phase in ("connect", "read", "write", "pool")}


def _record(response: Any) -> None:
    _last[0] = response


def unanswered(exc: BaseException) -> bool:
    """Whether `exc` is the transport failing (a deadline passed, a connection dropped),
    not an answer the hub gave."""
    import httpx2  # lazy: huggingface_hub's HTTP client, installed with it
    return isinstance(exc, httpx2.TransportError)


def _asked(exc: BaseException | None = None, response: Any = None) -> str:
    """`METHOD URL` of the request `exc` or `response` was about ('a request' if unknown)."""
    for source in (response, exc):
        try:
            request = source.request
            return redact_text(f"{request.method} {request.url}")
        except (AttributeError, RuntimeError):     # httpx2 raises RuntimeError when unset
            continue
    return "a request"


def _not_json(response: Any) -> str | None:
    """'STATUS TYPE, not the hub's JSON: b'...'' for an answer that is not JSON, else None."""
    ctype = str(response.headers.get("content-type", ""))
    if "json" in ctype.lower():
        return None
    try:
        body = bytes(response.content)
        shown = ascii(body[:SHOWN_BYTES]) + (" ..." if len(body) > SHOWN_BYTES else "")
    except Exception:       # noqa: BLE001 -- httpx2's ResponseNotRead, a closed stream
        shown = "(its body was not read)"
    return (f"{response.status_code} {ascii(ctype or 'with no content type')[1:-1]}, "
            f"not the hub's JSON: {shown}")


def describe(exc: BaseException) -> str:
    """One line saying what was asked of which endpoint and what came back (or did not)."""
    import httpx2  # lazy: huggingface_hub's HTTP client, installed with it
    if isinstance(exc, httpx2.TimeoutException):
        return (f"the hub at {endpoint()} did not answer {_asked(exc)} within "
                f"{HUB_TIMEOUT_S:g} s (each request's deadline)")
    if isinstance(exc, httpx2.TransportError):
        return (f"the hub at {endpoint()} dropped {_asked(exc)}: {type(exc).__name__}: "
                f"{redact_text(ascii(str(exc).splitlines()[0] if str(exc) else '')[1:-1])}")
    response = _last[0]
    said = _not_json(response) if response is not None else None
    if said is not None:
        return (f"the hub at {endpoint()} answered {_asked(response=response)} with {said}; "
                "is HF_ENDPOINT a Hugging Face hub?")
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {redact_text(ascii(first)[1:-1])}"
