"""The HTTP transport under hostile and unusual clients, over raw loopback sockets: bodies
over --max-body-bytes (chunked, gzip bombs, huge Content-Length) are cut off early without
the server's memory growing, unauthenticated requests are refused before their body,
pipelined requests and bodies that look like requests stay in sync, ambiguous framing and
oversized heads get a JSON error and a closed connection, keep-alive adds no latency, slow
or idle connections by the thousand do not starve other clients, HTTP/1.0 and half-closed
clients get whole responses, broken model files fail fast, and abandoned streams are
counted as cancelled."""

from __future__ import annotations

import gzip
import json
import random
import resource
import selectors
import socket
import subprocess
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import httpx
import pytest

from llamaserve_e2e import BIN, MODEL, parse_sse, wait_for

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
SMALL_COMPLETION = {"prompt": "Hi", "max_tokens": 2}
ONE_MIB = 1 << 20


# --- raw HTTP/1.x client -----------------------------------------------------------------


@dataclass
class RawResponse:
    version: str
    status: int
    headers: dict  # lower-case names; repeated headers joined with ", "
    body: bytes = field(repr=False)

    def json(self):
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"RawResponse({self.version} {self.status}, {self.headers}, body={self.body[:300]!r})"


def request_bytes(method: str, path: str, body: bytes | None = None, headers: tuple = (),
                  version: str = "HTTP/1.1") -> bytes:
    """One request head (plus body); a JSON body gets Content-Type and Content-Length."""
    lines = [f"{method} {path} {version}", "Host: 127.0.0.1", *headers]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def json_request(method: str, path: str, payload: dict, **kwargs) -> bytes:
    return request_bytes(method, path, json.dumps(payload).encode(), **kwargs)


def parse_response(buf: bytes, eof: bool = False):
    """(response, rest of buf) for the first complete response in buf, or None while it is
    incomplete. Handles Content-Length, chunked and close-delimited bodies."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    pos = end + 4
    if 100 <= status < 200 or status in (204, 304):
        return RawResponse(version, status, headers, b""), buf[pos:]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(buf[pos:line_end].split(b";")[0], 16)
            pos = line_end + 2
            if size == 0:
                while True:  # trailers, up to an empty line
                    line_end = buf.find(b"\r\n", pos)
                    if line_end < 0:
                        return None
                    done, pos = line_end == pos, line_end + 2
                    if done:
                        return RawResponse(version, status, headers, bytes(body)), buf[pos:]
            if len(buf) < pos + size + 2:
                return None
            assert buf[pos + size:pos + size + 2] == b"\r\n", f"bad chunk framing: {buf[pos:pos + 40]!r}"
            body += buf[pos:pos + size]
            pos += size + 2
    if "content-length" in headers:
        length = int(headers["content-length"])
        if len(buf) < pos + length:
            return None
        return RawResponse(version, status, headers, buf[pos:pos + length]), buf[pos + length:]
    if not eof:
        return None
    return RawResponse(version, status, headers, buf[pos:]), b""


class RawConnection:
    """A client socket with a read buffer, for what httpx will not send."""

    def __init__(self, port: int, timeout: float = 10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def settimeout(self, timeout: float) -> None:
        self.sock.settimeout(timeout)

    def send(self, data: bytes) -> bool:
        """False when the server has already closed (it may have answered first)."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def fill(self) -> None:
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if data:
            self.buf += data
        else:
            self.eof = True

    def read_response(self) -> RawResponse:
        while True:
            parsed = parse_response(self.buf, self.eof)
            if parsed:
                response, self.buf = parsed
                return response
            if self.eof:
                raise EOFError(f"connection closed inside a response; have {self.buf[:300]!r}")
            self.fill()

    def read_final_response(self) -> RawResponse:
        """The next response that is not an interim 1xx one."""
        while True:
            response = self.read_response()
            if response.status >= 200:
                return response

    def closed_by_peer(self, timeout: float = 5) -> bool:
        """True when the server closes (EOF or reset) within timeout with nothing more sent."""
        if self.buf:
            return False
        if self.eof:
            return True
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        self.buf += data
        self.eof = not data
        return not data


def assert_error_body(response: RawResponse, statuses) -> None:
    statuses = (statuses,) if isinstance(statuses, int) else statuses
    assert response.status in statuses, response
    assert response.headers.get("content-type", "").startswith("application/json"), response
    error = response.json()["error"]
    assert {"message", "type", "code"} <= set(error) and error["message"], response


def assert_closing_error(conn: RawConnection, response: RawResponse, statuses) -> None:
    """A JSON error with Connection: close, after which the server closes the socket."""
    assert_error_body(response, statuses)
    assert "close" in response.headers.get("connection", "").lower(), response
    assert conn.closed_by_peer(5), f"connection still open after {response}"


def push_until_answered(conn: RawConnection, pieces) -> int:
    """Sends pieces until the server answers or closes; returns the bytes sent."""
    sent = 0
    with selectors.DefaultSelector() as selector:
        selector.register(conn.sock, selectors.EVENT_READ)
        for piece in pieces:
            if selector.select(timeout=0):
                break
            try:
                conn.sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            except TimeoutError:
                pytest.fail(f"the server stopped reading the body without answering ({sent} bytes sent)")
            sent += len(piece)
    return sent


def health_ok(response: RawResponse) -> bool:
    return response.status == 200 and response.json().get("status") == "ok"


# --- server memory and file descriptors --------------------------------------------------


class PeakRss:
    """The server's peak RSS growth during a with-block: VmHWM reset through clear_refs,
    and sampling in case that reset is not allowed."""

    def __init__(self, server):
        self.server = server
        self.status_path = Path(f"/proc/{server.pid}/status")

    def _hwm(self) -> int:
        for line in self.status_path.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.server.rss_bytes())

    def __enter__(self) -> "PeakRss":
        try:
            Path(f"/proc/{self.server.pid}/clear_refs").write_text("5")
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self.base = self.server.rss_bytes()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.server.rss_bytes(), self._hwm() if self.hwm_reset else 0)

    @property
    def growth(self) -> int:
        return self.peak - self.base


@pytest.fixture
def raised_nofile():
    """Raises this process's RLIMIT_NOFILE soft limit to the hard one (servers started after
    it inherit it) and restores it afterwards; yields the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    yield target
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --- bodies over the limit ---------------------------------------------------------------


def test_chunked_body_over_the_limit_is_cut_off_early(make_server):
    """A chunked body that never ends gets 413 soon after --max-body-bytes, not after the
    server has buffered it."""
    server = make_server("--max-body-bytes", str(ONE_MIB))
    chunk = b"10000\r\n" + b"a" * 65536 + b"\r\n"
    with RawConnection(server.port) as conn, PeakRss(server) as rss:
        conn.send(request_bytes("POST", CHAT, headers=("Content-Type: application/json",
                                                       "Transfer-Encoding: chunked")))
        sent = push_until_answered(conn, (chunk for _ in range(4096)))  # up to 256 MiB
        assert sent < 64 * ONE_MIB, f"the server read {sent >> 20} MiB without answering"
        response = conn.read_response()
        assert_closing_error(conn, response, 413)
    assert rss.growth < 64 * ONE_MIB, f"RSS grew by {rss.growth >> 20} MiB"
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200


def gzip_of_zeros(size: int) -> bytes:
    """gzip of `size` zero bytes, built a MiB at a time (about 1/1000 of size)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(ONE_MIB)
    pieces = [compressor.compress(block) for _ in range(size // ONE_MIB)]
    pieces.append(compressor.flush())
    return b"".join(pieces)


def test_gzip_body_is_limited_by_its_inflated_size(make_server):
    """A ~255 KB gzip body that inflates to 256 MiB gets 413 without the server inflating it
    all; a small gzip body decompresses and works."""
    server = make_server("--max-body-bytes", str(ONE_MIB))
    bomb = gzip_of_zeros(256 * ONE_MIB)
    assert len(bomb) < ONE_MIB  # only the inflated size is over the limit
    with RawConnection(server.port) as conn, PeakRss(server) as rss:
        conn.send(request_bytes("POST", CHAT, headers=("Content-Type: application/json",
                                                       "Content-Encoding: gzip",
                                                       f"Content-Length: {len(bomb)}")))
        push_until_answered(conn, (bomb[i:i + 65536] for i in range(0, len(bomb), 65536)))
        response = conn.read_response()
        assert_closing_error(conn, response, 413)
    assert rss.growth < 64 * ONE_MIB, f"RSS grew by {rss.growth >> 20} MiB"
    body = gzip.compress(json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                     "max_tokens": 2}).encode())
    response = httpx.post(f"{server.url}{CHAT}", content=body, timeout=60,
                          headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["role"] == "assistant"


def test_unauthenticated_request_is_refused_before_its_body(make_server):
    """401 comes right after the head of a 128 MiB upload without a key (the body limit is
    higher, so only auth can refuse it), then the server closes. The scheme is
    case-insensitive."""
    server = make_server("--api-key", "secret", "--max-body-bytes", str(256 * ONE_MIB),
                         wait_ready=False)
    server.wait_ready(headers={"Authorization": "Bearer secret"})
    with RawConnection(server.port, timeout=5) as conn:
        conn.send(request_bytes("POST", CHAT, headers=("Content-Type: application/json",
                                                       f"Content-Length: {128 * ONE_MIB}")))
        try:
            response = conn.read_response()
        except TimeoutError:
            pytest.fail("no answer within 5 s of the head: the server waits for the body")
        assert_closing_error(conn, response, 401)
    models = f"{server.url}/v1/models"
    for scheme in ("Bearer", "bearer", "BEARER"):
        response = httpx.get(models, headers={"Authorization": f"{scheme} secret"}, timeout=10)
        assert response.status_code == 200, (scheme, response.text)
    assert httpx.get(models, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401


# --- framing -----------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(server):
    """Ten requests in one write on one connection get ten responses, in order."""
    health = request_bytes("GET", "/health")
    models = request_bytes("GET", "/v1/models")
    completion = json_request("POST", COMPLETIONS, SMALL_COMPLETION)
    kinds = ["health", "models", "completion", "health", "completion", "models", "health",
             "completion", "models", "health"]
    raw = {"health": health, "models": models, "completion": completion}
    with RawConnection(server.port, timeout=60) as conn:
        assert conn.send(b"".join(raw[kind] for kind in kinds))
        for index, kind in enumerate(kinds):
            try:
                response = conn.read_response()
            except EOFError:
                pytest.fail(f"connection closed before response {index} ({kind})")
            assert response.status == 200, (index, kind, response)
            body = response.json()
            if kind == "health":
                assert body["status"] == "ok", (index, response)
            elif kind == "models":
                assert body["object"] == "list", (index, response)
            else:
                assert body["object"] == "text_completion" and body["choices"], (index, response)
        # Still in sync: one more request, one more response, nothing else.
        assert conn.send(health)
        assert health_ok(conn.read_response())
        assert conn.buf == b""


# Looks like a request wherever a transport that lost track of the body would resume.
INJECTED = "\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
INJECTED_PROMPT = "a" * 4100 + INJECTED + "b" * 900 + INJECTED + "c" * 900 + INJECTED


@pytest.mark.parametrize("body", [
    # Raw CR LF bytes (invalid JSON, so a 400): what a parser reading the body as requests sees.
    b'{"prompt": "' + INJECTED_PROMPT.encode() + b'", "max_tokens": 1}',
    json.dumps({"prompt": INJECTED_PROMPT, "max_tokens": 1}).encode(),
], ids=["raw-crlf", "json-escaped"])
def test_body_bytes_are_never_parsed_as_requests(server, body):
    """A 6 KB body with request-looking text past its first 4 KB, then a real request: two
    responses, no models listing."""
    assert len(body) > 6000 and body.find(b"GET /v1/models") > 4096
    with RawConnection(server.port, timeout=60) as conn:
        assert conn.send(request_bytes("POST", COMPLETIONS, body)
                         + request_bytes("GET", "/health", headers=("Connection: close",)))
        responses = []
        while True:
            try:
                responses.append(conn.read_response())
            except EOFError:
                break
            if len(responses) > 5:
                break
        assert conn.buf == b"", f"a partial response after {responses}: {conn.buf[:300]!r}"
    for response in responses:
        assert b'"object":"list"' not in response.body.replace(b" ", b""), \
            f"body bytes were served as a request: {responses}"
    assert len(responses) == 2, responses
    completion, health = responses
    assert completion.status in (200, 400), completion
    if completion.status == 200:
        assert completion.json()["choices"], completion
    else:
        assert_error_body(completion, 400)
    assert health_ok(health), health


@pytest.mark.parametrize("headers, statuses", [
    (("Content-Length: 5", "Transfer-Encoding: chunked"), (400,)),
    (("Transfer-Encoding: gzip",), (400, 501)),
    (("Transfer-Encoding: chunked, gzip",), (400, 501)),
    (("Content-Length: 5", "Content-Length: 6"), (400,)),
], ids=["length-and-chunked", "te-gzip", "te-gzip-last", "two-lengths"])
def test_ambiguous_framing_is_rejected_and_closed(server, headers, statuses):
    """Framing two parsers could read differently gets an error and a closed connection,
    never a response to what follows."""
    smuggled = b"0\r\n\r\n" + request_bytes("GET", "/v1/models")
    with RawConnection(server.port, timeout=5) as conn:
        conn.send(request_bytes("POST", COMPLETIONS, headers=("Content-Type: application/json", *headers))
                  + smuggled)
        response = conn.read_response()
        assert_closing_error(conn, response, statuses)


# --- latency and many connections ---------------------------------------------------------


def test_keep_alive_adds_no_latency(server):
    """Requests on a reused connection are as fast as on new ones (no Nagle/delayed-ACK
    stall between a response's head and body)."""
    with RawConnection(server.port) as conn:
        times = []
        for i in range(100):
            start = time.monotonic()
            assert conn.send(request_bytes("GET", "/health"))
            assert health_ok(conn.read_response())
            if i:  # the first one warms up
                times.append(time.monotonic() - start)
    assert median(times) < 0.002, f"/health keep-alive median {median(times) * 1000:.1f} ms"
    payload = {"prompt": "Hi", "max_tokens": 1, "temperature": 0}
    pooled_times, fresh_times = [], []
    with httpx.Client(base_url=server.url, timeout=60) as pooled, \
            httpx.Client(base_url=server.url, timeout=60,
                         limits=httpx.Limits(max_keepalive_connections=0)) as fresh:
        assert pooled.post(COMPLETIONS, json=payload).status_code == 200
        for _ in range(20):  # interleaved, so that both see the same load
            for client, times in ((pooled, pooled_times), (fresh, fresh_times)):
                start = time.monotonic()
                response = client.post(COMPLETIONS, json=payload)
                times.append(time.monotonic() - start)
                assert response.status_code == 200, response.text
    assert median(pooled_times) <= median(fresh_times) + 0.010, (
        f"pooled median {median(pooled_times) * 1000:.1f} ms, "
        f"fresh {median(fresh_times) * 1000:.1f} ms")


class SlowLoris(threading.Thread):
    """Holds `count` connections that each send one more byte of an endless request head
    about once a second, from this one thread; a connection the server closes is replaced."""

    HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

    def __init__(self, port: int, count: int, period_s: float = 1.0):
        super().__init__(daemon=True)
        self.port, self.count, self.period_s = port, count, period_s
        self.selector = selectors.DefaultSelector()
        self.state: dict[socket.socket, list] = {}  # socket -> [bytes sent, next send time]
        self.stopping = threading.Event()
        self.answers: list[bytes] = []  # what the server sent on the slow connections
        self.replaced = 0
        self.error: BaseException | None = None
        now = time.monotonic()
        for i in range(count):
            self._open(now + period_s * i / count)

    def _open(self, due: float) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ)
        self.state[sock] = [0, due]

    def _drop(self, sock: socket.socket) -> None:
        self.selector.unregister(sock)
        del self.state[sock]
        sock.close()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                for sock, entry in list(self.state.items()):
                    if entry[1] > now:
                        continue
                    byte = self.HEAD[entry[0]:entry[0] + 1] or b"a"
                    try:
                        entry[0] += sock.send(byte)
                    except BlockingIOError:
                        pass
                    except OSError:
                        self._drop(sock)
                        continue
                    entry[1] += self.period_s
                for key, _ in self.selector.select(timeout=0.05):
                    try:
                        data = key.fileobj.recv(4096)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        self.answers.append(data[:64])
                    self._drop(key.fileobj)
                while len(self.state) < self.count and self.replaced < 4 * self.count:
                    self._open(time.monotonic() + self.period_s * random.random())
                    self.replaced += 1
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        for sock in list(self.state):
            self._drop(sock)
        self.selector.close()


def test_slow_loris_does_not_starve_other_clients(raised_nofile, make_server):
    """500 connections dribbling a request head a byte a second for 20 s: /health still
    answers within 1 s and a short completion within 10 s, every 2 s throughout."""
    server = make_server()
    loris = SlowLoris(server.port, 500)
    loris.start()
    failures = []
    try:
        start = time.monotonic()
        probe = 0
        while time.monotonic() - start < 20:
            probe_start = time.monotonic()
            try:
                response = httpx.get(f"{server.url}/health", timeout=1)
                took = time.monotonic() - probe_start
                if response.status_code != 200 or took > 1:
                    failures.append(f"probe {probe}: /health {response.status_code} in {took:.2f} s")
            except httpx.TransportError as error:
                failures.append(f"probe {probe}: /health failed: {error!r}")
            try:
                completion_start = time.monotonic()
                response = httpx.post(f"{server.url}{COMPLETIONS}", timeout=10,
                                      json={"prompt": "Hello", "max_tokens": 4})
                took = time.monotonic() - completion_start
                if response.status_code != 200 or took > 10:
                    failures.append(f"probe {probe}: completion {response.status_code} in {took:.2f} s: "
                                    f"{response.text[:200]}")
            except httpx.TransportError as error:
                failures.append(f"probe {probe}: completion failed: {error!r}")
            probe += 1
            time.sleep(max(0.0, probe_start + 2 - time.monotonic()))
    finally:
        loris.stop()
    assert loris.error is None, repr(loris.error)
    assert not failures, failures
    # The server may end a dribbling head at --header-timeout-ms (10 s): with a 408.
    assert all(answer[9:12] == b"408" for answer in loris.answers), loris.answers[:5]
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200


IDLE_CONNECTIONS = 2000


def test_thousands_of_idle_keep_alive_connections(raised_nofile, make_server):
    """2000 keep-alive connections left idle after one request each: new clients are served
    at once and the idle ones stay usable."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4200:
        pytest.skip("RLIMIT_NOFILE hard limit below 4200")
    server = make_server()
    health = request_bytes("GET", "/health")
    deadline = time.monotonic() + 20
    conns: list[RawConnection] = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            conn = RawConnection(server.port, timeout=5)
            conns.append(conn)
            assert conn.send(health)
            assert time.monotonic() < deadline, f"only {len(conns)} connections in 20 s"
        answered = 0
        with selectors.DefaultSelector() as selector:
            for conn in conns:
                selector.register(conn.sock, selectors.EVENT_READ, conn)
            while answered < len(conns) and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                    conn = key.data
                    conn.fill()
                    parsed = parse_response(conn.buf, conn.eof)
                    if parsed or conn.eof:
                        selector.unregister(conn.sock)
                        assert parsed, f"closed without an answer: {conn.buf[:200]!r}"
                        assert health_ok(parsed[0]), parsed[0]
                        conn.buf = parsed[1]
                        answered += 1
        assert answered == len(conns), f"{answered} of {len(conns)} answered within 20 s"
        time.sleep(3)
        start = time.monotonic()
        response = httpx.get(f"{server.url}/health", timeout=1)
        assert response.status_code == 200 and time.monotonic() - start < 1
        with selectors.DefaultSelector() as selector:  # readable while idle = closed
            for conn in conns:
                selector.register(conn.sock, selectors.EVENT_READ)
            closed = len(selector.select(timeout=0))
        assert closed <= 0.05 * len(conns), f"{closed} of {len(conns)} idle connections closed"
        ok = 0
        for conn in random.Random(0).sample(conns, 50):
            conn.settimeout(5)
            try:
                ok += conn.send(health) and health_ok(conn.read_response())
            except (EOFError, OSError):
                pass
        assert ok >= 48, f"only {ok} of 50 idle connections answered"
    finally:
        for conn in conns:
            conn.close()


# --- process start -----------------------------------------------------------------------


def timed_serve(path: Path) -> tuple[int | None, float, str]:
    start = time.monotonic()
    try:
        proc = subprocess.run([str(BIN), "serve", "-m", str(path), "--port", "0"],
                              capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start, "still running after 10 s"
    return proc.returncode, time.monotonic() - start, proc.stderr[-300:]


def test_broken_model_files_fail_fast_every_time(tmp_path):
    """Each of 4 kinds of broken model file ends `serve` with an error status (not a signal)
    within 1 s, 20 times out of 20. Wider than test_serve_exits_at_once_when_the_model_cannot_load."""
    broken = {kind: tmp_path / f"{kind}.gguf" for kind in ("empty", "random", "truncated", "missing")}
    broken["empty"].write_bytes(b"")
    broken["random"].write_bytes(random.Random(1).randbytes(ONE_MIB))
    with open(MODEL, "rb") as model:
        broken["truncated"].write_bytes(model.read(ONE_MIB))
    runs = [(kind, path) for kind, path in broken.items() for _ in range(20)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda run: (run[0], *timed_serve(run[1])), runs))
    bad = [(kind, rc, round(elapsed, 2), err) for kind, rc, elapsed, err in results
           if rc is None or rc <= 0 or elapsed >= 1]
    assert not bad, f"{len(bad)} of {len(results)} runs: {bad[:5]}"


# --- protocol versions and half-close -----------------------------------------------------


def test_http10_clients_get_close_delimited_responses(server):
    """HTTP/1.0 without keep-alive: a sized response then a close; a stream is raw SSE text
    (no chunked coding, which 1.0 lacks) ended by the close."""
    with RawConnection(server.port, timeout=10) as conn:
        assert conn.send(request_bytes("GET", "/health", version="HTTP/1.0"))
        response = conn.read_response()
        assert response.version.startswith("HTTP/1."), response
        assert "content-length" in response.headers, response
        assert health_ok(response), response
        assert conn.closed_by_peer(5), "HTTP/1.0 connection left open"
    with RawConnection(server.port, timeout=30) as conn:
        assert conn.send(json_request("POST", COMPLETIONS, {"prompt": "Hi", "max_tokens": 4, "stream": True},
                                      version="HTTP/1.0"))
        response = conn.read_response()  # read to the close: nothing else delimits it
        assert response.status == 200, response
        assert "transfer-encoding" not in response.headers, response
        assert "content-length" not in response.headers, response
        text = response.body.decode()
        for line in text.splitlines():
            assert line == "" or line.split(":")[0] in ("data", "event", "id", "retry", ""), \
                f"not SSE: {line!r} in {text[:300]!r}"
        events = parse_sse(text)
        assert events and events[-1][1] == "[DONE]", text[-300:]
        assert json.loads(events[0][1])["choices"], text[:300]


@pytest.mark.parametrize("request_raw", [
    json_request("POST", COMPLETIONS, {"prompt": "Hi", "max_tokens": 4}),
    request_bytes("GET", "/health"),
], ids=["completion", "health"])
def test_half_closed_client_still_gets_its_response(server, request_raw):
    """A client that shuts down its sending side after the request gets the whole response,
    then the close."""
    with RawConnection(server.port, timeout=30) as conn:
        assert conn.send(request_raw)
        conn.sock.shutdown(socket.SHUT_WR)
        response = conn.read_final_response()
        assert response.status == 200, response
        body = response.json()
        if request_raw.startswith(b"POST"):
            assert body["choices"] and body["usage"]["completion_tokens"] >= 1, response
        else:
            assert body["status"] == "ok", response
        assert conn.closed_by_peer(5)


# --- limits on the head and the declared length -------------------------------------------


def test_oversized_content_length_is_refused_at_once(server):
    """A declared length over --max-body-bytes gets 413 before any body is sent, then a close."""
    with RawConnection(server.port, timeout=5) as conn:
        start = time.monotonic()
        conn.send(request_bytes("POST", COMPLETIONS, headers=("Content-Type: application/json",
                                                              "Content-Length: 10000000000")))
        try:
            response = conn.read_response()
        except TimeoutError:
            pytest.fail("no answer within 5 s: the server waits for (or skips) the body")
        took = time.monotonic() - start
        assert_closing_error(conn, response, 413)
    assert took < 1, f"413 after {took:.2f} s"


@pytest.mark.parametrize("raw, status", [
    (request_bytes("GET", "/health?" + "a" * 9000), 414),
    (request_bytes("GET", "/health", headers=("X-Big: " + "a" * 9000,)), 431),
    (request_bytes("GET", "/health", headers=tuple(f"X-H{i}: " + "a" * 1000 for i in range(40))), 431),
], ids=["request-line-9000", "header-9000", "headers-40x1000"])
def test_oversized_heads_are_refused_and_closed(server, raw, status):
    """A request line over 8 KiB gets 414; a header line over 8 KiB or a head over 32 KiB gets
    431; at once, then a close. The server keeps serving."""
    with RawConnection(server.port, timeout=5) as conn:
        start = time.monotonic()
        conn.send(raw)
        response = conn.read_response()
        took = time.monotonic() - start
        assert_closing_error(conn, response, status)
    assert took < 1, f"{status} after {took:.2f} s"
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200


# --- metrics -----------------------------------------------------------------------------


FINISHED = "llamaserve_generations_finished_total"


def finished_samples(server) -> dict:
    return {dict(labels).get("reason"): value for (name, labels), value in server.metrics().samples.items()
            if name == FINISHED}


def test_abandoned_stream_is_counted_as_cancelled(server):
    """A stream the client leaves after its first event counts once as reason="cancelled"."""
    assert wait_for(lambda: server.metrics().get("llamaserve_running_sequences") == 0, timeout_s=10)
    before = server.metrics()
    with httpx.stream("POST", f"{server.url}{COMPLETIONS}", timeout=60,
                      json={"prompt": "1, 2, 3, 4, 5,", "temperature": 0, "ignore_eos": True,
                            "max_tokens": 200, "stream": True}) as response:
        assert response.status_code == 200
        lines = response.iter_lines()  # kept alive: dropping it would close the connection
        while not next(lines).startswith("data: "):
            pass
    cancelled = before.get(FINISHED, reason="cancelled") + 1

    def counted():
        metrics = server.metrics()
        return metrics.get(FINISHED, reason="cancelled") >= cancelled and metrics

    after = wait_for(counted, timeout_s=10)
    assert after, f"{FINISHED} for reason cancelled did not rise: {finished_samples(server)}"
    assert after.get(FINISHED, reason="cancelled") == cancelled
    assert after.total(FINISHED) == before.total(FINISHED) + 1
