#!/usr/bin/env python3
"""A stand-in OpenAI server that streams at a known rate, for measuring `llamaserve loadtest`
itself (its timing error and its own cost per event) and for testing its failure counting.

Standard library only (asyncio, one thread). POST /v1/completions and /v1/chat/completions
answer a chunked SSE stream of --events events (default: the request's max_tokens), one
token each, sent --interval-ms apart on a fixed schedule from the first (so a late event does
not delay the next ones), then a usage chunk and [DONE]. --first-ms delays the first event.
GET /v1/models lists "fake". --status 429 answers every generation request with that status
instead. Keep-alive HTTP/1.1 throughout.

  python3 bench/loadtest/fake_sse_server.py --port 8090 --interval-ms 20

prints "listening on http://127.0.0.1:PORT" once it accepts connections (--port 0 picks one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class FakeServer:
    def __init__(self, args):
        self.args = args
        self.completion_event = sse({"id": "x", "object": "text_completion", "model": "fake",
                                     "choices": [{"index": 0, "text": " tok", "finish_reason": None}]})
        self.chat_event = sse({"id": "x", "object": "chat.completion.chunk", "model": "fake",
                               "choices": [{"index": 0, "delta": {"content": " tok"},
                                            "finish_reason": None}]})

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self.answer(method, target, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def answer(self, method: str, target: str, body: bytes, writer: asyncio.StreamWriter):
        if method == "GET" and target == "/v1/models":
            return await self.plain(writer, 200, {"object": "list", "data": [{"id": "fake"}]})
        if method != "POST" or target not in ("/v1/completions", "/v1/chat/completions"):
            return await self.plain(writer, 404, {"error": {"message": "not found"}})
        if self.args.status != 200:
            return await self.plain(writer, self.args.status,
                                    {"error": {"message": "busy", "type": "rate_limit"}})
        request = json.loads(body or b"{}")
        events = self.args.events or int(request.get("max_tokens", 16))
        event = self.chat_event if target.endswith("chat/completions") else self.completion_event
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        start = time.monotonic() + self.args.first_ms / 1000
        interval = self.args.interval_ms / 1000
        for i in range(events):
            delay = start + i * interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(chunk(event))
            await writer.drain()
        usage = {"id": "x", "choices": [], "usage": {"prompt_tokens": 1,
                                                     "completion_tokens": events,
                                                     "total_tokens": events + 1}}
        writer.write(chunk(sse(usage)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async def plain(self, writer, status: int, obj):
        payload = json.dumps(obj).encode()
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"\r\n%s" % (status, len(payload), payload))
        await writer.drain()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval-ms", type=float, default=20.0, help="gap between events")
    parser.add_argument("--first-ms", type=float, default=0.0, help="delay of the first event")
    parser.add_argument("--events", type=int, default=0, help="events per answer (0: max_tokens)")
    parser.add_argument("--status", type=int, default=200, help="answer generation with this")
    parser.add_argument("--seconds", type=float, default=600, help="exit after this long")
    args = parser.parse_args()
    fake = FakeServer(args)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", args.port, backlog=1024)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await asyncio.sleep(args.seconds)


if __name__ == "__main__":
    asyncio.run(main())
