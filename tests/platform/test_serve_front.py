"""`serve_front.CancelOnDisconnect` on scripted ASGI messages (no server, no Ray): a client
that leaves before its answer is complete cancels the app, as Serve's proxy does; one that
leaves after it does not."""

from __future__ import annotations

import asyncio
from typing import Any

from rayworks.platform.serve_front import CancelOnDisconnect

SCOPE = {"type": "http", "path": "/v1/completions", "method": "POST", "headers": []}
BODY = {"type": "http.request", "body": b'{"prompt": "hi"}', "more_body": False}
DISCONNECT = {"type": "http.disconnect"}


def scripted(messages: list[dict], gate: asyncio.Event) -> Any:
    """A server's `receive`: the body at once, then the disconnect once `gate` is set."""
    queue = list(messages)

    async def receive() -> dict:
        message = queue.pop(0)
        if message is DISCONNECT:
            await gate.wait()
        return message

    return receive


def run(app: Any, gate_after_start: bool) -> tuple[dict, list[dict]]:
    seen: dict[str, Any] = {}
    sent: list[dict] = []

    async def main() -> None:
        gate = asyncio.Event()

        async def send(message: dict) -> None:
            sent.append(message)

        task = asyncio.ensure_future(
            CancelOnDisconnect(app(seen, gate))(SCOPE, scripted([BODY, DISCONNECT], gate), send)
        )
        if gate_after_start:
            await asyncio.sleep(0)
            while "body" not in seen:
                await asyncio.sleep(0.001)
            gate.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(main())
    return seen, sent


def slow_app(seen: dict, gate: asyncio.Event) -> Any:
    """Reads its body, then 'generates' for an hour unless cancelled."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        seen["body"] = (await receive())["body"]
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise

    return app


def quick_app(seen: dict, gate: asyncio.Event) -> Any:
    """Answers at once, lets the client leave, then reads what the server sends next."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        seen["body"] = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})
        gate.set()
        seen["after"] = (await receive())["type"]
        await asyncio.sleep(0.01)  # still running when the disconnect arrived
        seen["finished"] = True

    return app


def test_a_client_that_leaves_mid_answer_cancels_the_app() -> None:
    seen, sent = run(slow_app, gate_after_start=True)
    assert seen["body"] == BODY["body"]  # the app read its body through the middleware
    assert seen.get("cancelled") is True
    assert sent == []  # nothing was answered to a client that is gone


def test_a_client_that_leaves_after_the_answer_does_not_cancel_it() -> None:
    seen, sent = run(quick_app, gate_after_start=False)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert seen["after"] == "http.disconnect"  # passed on to the app, not acted on
    assert seen.get("finished") is True


def test_other_scopes_pass_through() -> None:
    calls = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        calls.append(scope["type"])

    asyncio.run(CancelOnDisconnect(app)({"type": "lifespan"}, None, None))
    assert calls == ["lifespan"]
