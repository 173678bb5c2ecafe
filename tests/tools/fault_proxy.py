#!/usr/bin/env python3
"""A small fault-injecting TCP proxy for resilience tests (stdlib only: asyncio in one thread).

It listens on a local port and forwards every connection to one upstream address, and can be
told at any time to misbehave, on every connection, on the existing ones only, or on new ones:

    pass       forward both ways as fast as the peers go (the default)
    freeze     stop forwarding both ways; keep both sockets open; what was read is held and
               forwarded when the mode goes back to pass or trickle
    trickle    forward at most N bytes per interval in each direction
    drop       stop forwarding for good and never send a FIN or RST: the sockets stay open,
               unread and unwritten, until the proxy closes (a peer that vanished)
    reset      abort both sides with an RST now (SO_LINGER 0); new connections are reset at once
    blackhole  read and discard both sides, forward nothing, never answer; new connections are
               accepted and never connected upstream (a partition: packets lost, nothing refused).
               A blackholed connection carried nothing, so it cannot resume: switching it to any
               other mode resets it (RST both sides), and its peers notice at once and reconnect

A mode can be scoped to the connections from one source IP (`source=`): a proxy in front of one
machine's port then cuts or stalls the link of one peer while the others pass. A source's own
mode wins over the proxy-wide one for the connections it covers.

With `keep_source=True` the upstream connection is made from the client's own IP (bound before
the connect; any 127/8 address works on loopback), so a server that checks where a connection
comes from (the mesh's address checks, docs/mesh.md) sees the real peer, not the proxy.

In tests: `FaultProxy(upstream_port).start()`, then `set_mode(...)`, `connections()`,
`close()`. From a shell: `fault_proxy.py --upstream 127.0.0.1:8443 --control 0` prints the
ports; the control socket takes lines `mode MODE [BYTES INTERVAL] [all|existing|new]
[from IP]`, `status` (JSON) and `quit`, each answered with one line.
"""
import argparse
import asyncio
import json
import socket
import struct
import sys
import threading
import time

MODES = ("pass", "freeze", "trickle", "drop", "reset", "blackhole")
_READ_SIZE = 65536


class _Mode:
    def __init__(self, name="pass", bytes_per_interval=1, interval=1.0):
        if name not in MODES:
            raise ValueError(f"unknown mode {name!r}")
        self.name = name
        self.bytes_per_interval = max(1, int(bytes_per_interval))
        self.interval = float(interval)

    def as_dict(self):
        return {"mode": self.name, "bytes": self.bytes_per_interval, "interval": self.interval}


class Connection:
    """One proxied connection. Counters are read from other threads (plain ints, no locking)."""

    def __init__(self, number, client, peer, mode):
        self.number = number
        self.client = client
        self.upstream = None
        self.peer = peer
        self.source = peer.rpartition(":")[0]  # the client's IP
        self.mode = mode
        self.accepted_at = time.monotonic()
        self.closed_at = None
        self.bytes_up = 0  # client -> upstream, forwarded
        self.bytes_down = 0  # upstream -> client, forwarded
        self.discarded = 0
        self.upstream_eof_at = None  # upstream ended (EOF or reset) while we were reading it
        self.client_eof_at = None
        self.how_closed = None
        self.tasks = []
        self.finished_directions = 0

    def as_dict(self):
        return {"number": self.number, "peer": self.peer, "mode": self.mode.name,
                "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "discarded": self.discarded, "closed": self.closed_at is not None,
                "how_closed": self.how_closed, "accepted_at": self.accepted_at,
                "closed_at": self.closed_at}


def _abort(sock):
    """Close with an RST (SO_LINGER on, zero timeout)."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class FaultProxy:
    def __init__(self, upstream_port, upstream_host="127.0.0.1", listen_host="127.0.0.1",
                 listen_port=0, control_port=None, keep_source=False):
        self.upstream = (upstream_host, upstream_port)
        self.keep_source = keep_source
        self._listen_addr = (listen_host, listen_port)
        self._control_port = control_port
        self.port = None
        self.control_port = None
        self._default = _Mode()
        self._by_source = {}  # source IP -> its mode for new connections
        self._conns = []
        self._loop = None
        self._thread = None
        self._wake = None
        self._listener = None
        self._accept_task = None
        self._control_server = None
        self._counter = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self):
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True,
                                        name=f"fault-proxy->{self.upstream[1]}")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def _run(self, ready):
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._setup())
        ready.set()
        self._loop.run_forever()

    async def _setup(self):
        self._wake = asyncio.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(self._listen_addr)
        self._listener.listen(1024)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._accept_task = asyncio.ensure_future(self._accept())
        if self._control_port is not None:
            self._control_server = await asyncio.start_server(
                self._control, "127.0.0.1", self._control_port)
            self.control_port = self._control_server.sockets[0].getsockname()[1]

    def _call(self, function, *args, timeout=10):
        """Runs function(*args) on the proxy's loop and returns its result."""
        async def wrapper():
            return function(*args)
        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(timeout)

    def close(self):
        if self._loop is None or not self._thread.is_alive():
            return
        async def shutdown():
            self._accept_task.cancel()
            if self._control_server is not None:
                self._control_server.close()
            for conn in self._conns:
                self._stop_tasks(conn)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            for conn in self._conns:
                for sock in (conn.client, conn.upstream):
                    if sock is not None:
                        try:
                            sock.close()
                        except OSError:
                            pass
                if conn.closed_at is None:
                    conn.closed_at = time.monotonic()
                    conn.how_closed = conn.how_closed or "proxy_closed"
            self._listener.close()
            # Every task (control clients, pumps, discards) ends here, before the loop stops.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    # -- control ---------------------------------------------------------------------------

    def set_mode(self, mode, bytes_per_interval=1, interval=1.0, scope="all", source=None):
        """scope: "all" (existing connections and new ones), "existing", or "new". source: only
        the connections from this IP (None: every connection without a source mode of its own;
        for "existing", every connection)."""
        if scope not in ("all", "existing", "new"):
            raise ValueError(f"unknown scope {scope!r}")
        new_mode = _Mode(mode, bytes_per_interval, interval)
        self._call(self._apply, new_mode, scope, source)

    def set_connection_mode(self, number, mode, bytes_per_interval=1, interval=1.0):
        new_mode = _Mode(mode, bytes_per_interval, interval)
        self._call(self._apply_one, number, new_mode)

    def connections(self):
        """Snapshot dicts of every connection so far (oldest first)."""
        return self._call(lambda: [c.as_dict() for c in self._conns])

    def connection(self, number):
        return self._conns[number]

    def _apply(self, mode, scope, source=None):
        if scope in ("all", "new"):
            if source is None:
                self._default = mode
            else:
                self._by_source[source] = mode
        if scope in ("all", "existing"):
            for conn in self._conns:
                if conn.closed_at is not None:
                    continue
                if source is None and scope == "all" and conn.source in self._by_source:
                    continue  # its source's own mode wins
                if source is None or conn.source == source:
                    self._set_conn_mode(conn, mode)
        self._notify()

    def _apply_one(self, number, mode):
        conn = self._conns[number]
        if conn.closed_at is None:
            self._set_conn_mode(conn, mode)
        self._notify()

    def _notify(self):
        self._wake.set()
        self._wake = asyncio.Event()

    def _set_conn_mode(self, conn, mode):
        if conn.mode.name == "drop":
            return  # a dropped connection never comes back
        previous = conn.mode.name
        conn.mode = mode
        if mode.name == "reset":
            self._reset(conn)
        elif mode.name == "drop":
            self._stop_tasks(conn)  # nothing is read or written again; sockets stay open
        elif mode.name == "blackhole" and previous != "blackhole":
            self._stop_tasks(conn)
            conn.tasks = [asyncio.ensure_future(self._discard(conn, s))
                          for s in (conn.client, conn.upstream) if s is not None]
        elif previous == "blackhole" and mode.name != "blackhole":
            self._reset(conn)  # what it carried was discarded: the stream cannot resume

    def _stop_tasks(self, conn):
        for task in conn.tasks:
            task.cancel()
        conn.tasks = []

    def _reset(self, conn):
        self._stop_tasks(conn)
        self._abort_later(conn)
        conn.closed_at = time.monotonic()
        conn.how_closed = "reset_by_proxy"

    # -- data path -------------------------------------------------------------------------

    async def _accept(self):
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, address = await loop.sock_accept(self._listener)
            except asyncio.CancelledError:
                raise
            except OSError:
                await asyncio.sleep(0.05)
                continue
            client.setblocking(False)
            conn = Connection(len(self._conns), client, f"{address[0]}:{address[1]}",
                              self._by_source.get(address[0], self._default))
            self._conns.append(conn)
            asyncio.ensure_future(self._open(conn))

    async def _open(self, conn):
        loop = asyncio.get_running_loop()
        if conn.mode.name == "reset":
            self._reset(conn)
            return
        if conn.mode.name == "blackhole":
            conn.tasks = [asyncio.ensure_future(self._discard(conn, conn.client))]
            return
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        try:
            if self.keep_source:
                upstream.bind((conn.source, 0))
            await loop.sock_connect(upstream, self.upstream)
        except OSError:
            upstream.close()
            _abort(conn.client)
            conn.closed_at = time.monotonic()
            conn.how_closed = "upstream_refused"
            return
        conn.upstream = upstream
        if conn.mode.name in ("drop", "blackhole", "reset"):
            mode = conn.mode
            conn.mode = _Mode()
            self._set_conn_mode(conn, mode)
            return
        conn.tasks = [asyncio.ensure_future(self._pump(conn, conn.client, upstream, "up")),
                      asyncio.ensure_future(self._pump(conn, upstream, conn.client, "down"))]

    async def _wait_for_change(self):
        await self._wake.wait()

    async def _pump(self, conn, source, sink, direction):
        loop = asyncio.get_running_loop()
        held = b""
        while True:
            while conn.mode.name == "freeze":
                await self._wait_for_change()
            size = conn.mode.bytes_per_interval if conn.mode.name == "trickle" else _READ_SIZE
            if not held:
                try:
                    held = await loop.sock_recv(source, size)
                except (ConnectionError, OSError):
                    self._ended(conn, direction, "reset")
                    return
                if not held:
                    self._ended(conn, direction, "eof")
                    try:
                        sink.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    conn.finished_directions += 1
                    if conn.finished_directions == 2:
                        self._close_pair(conn, "eof")
                    return
            while conn.mode.name == "freeze":  # read before the freeze: held, not forwarded
                await self._wait_for_change()
            if conn.mode.name == "trickle":
                piece, held = held[:conn.mode.bytes_per_interval], held[conn.mode.bytes_per_interval:]
            else:
                piece, held = held, b""
            try:
                await loop.sock_sendall(sink, piece)
            except (ConnectionError, OSError):
                self._ended(conn, direction, "reset")
                return
            if direction == "up":
                conn.bytes_up += len(piece)
            else:
                conn.bytes_down += len(piece)
            if conn.mode.name == "trickle":
                await asyncio.sleep(conn.mode.interval)  # the trickle's pace

    def _ended(self, conn, direction, how):
        now = time.monotonic()
        if direction == "down" and conn.upstream_eof_at is None:
            conn.upstream_eof_at = now
        if direction == "up" and conn.client_eof_at is None:
            conn.client_eof_at = now
        if how == "reset":
            # One side failed: abort the other too, as a TCP middlebox that loses state would.
            self._stop_tasks_except_current(conn)
            self._abort_later(conn)
            conn.closed_at = now
            conn.how_closed = f"{'upstream' if direction == 'down' else 'client'}_reset"

    @staticmethod
    def _abort_later(conn):
        # After the cancelled reads have unregistered their descriptors (next loop iteration).
        loop = asyncio.get_running_loop()
        loop.call_soon(_abort, conn.client)
        loop.call_soon(_abort, conn.upstream)

    def _stop_tasks_except_current(self, conn):
        current = asyncio.current_task()
        for task in conn.tasks:
            if task is not current:
                task.cancel()
        conn.tasks = []

    def _close_pair(self, conn, how):
        for sock in (conn.client, conn.upstream):
            asyncio.get_running_loop().call_soon(sock.close)
        conn.closed_at = time.monotonic()
        conn.how_closed = how

    async def _discard(self, conn, sock):
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await loop.sock_recv(sock, _READ_SIZE)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                # The peer gave up (we never answered): close our side of it too.
                if sock is conn.client and conn.closed_at is None:
                    conn.closed_at = time.monotonic()
                    conn.how_closed = "client_gave_up"
                loop.call_soon(sock.close)
                return
            conn.discarded += len(data)

    # -- the control socket ----------------------------------------------------------------

    async def _control(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                words = line.decode(errors="replace").split()
                try:
                    answer = self._command(words)
                except (ValueError, IndexError) as error:
                    answer = f"error {error}"
                writer.write((answer + "\n").encode())
                await writer.drain()
                if words and words[0] == "quit":
                    asyncio.get_running_loop().call_soon(asyncio.get_running_loop().stop)
                    return
        except asyncio.CancelledError:
            return  # the proxy is closing (a cancelled handler task would be logged as an error)
        finally:
            writer.close()

    def _command(self, words):
        if not words:
            return "error empty command"
        if words[0] == "mode":
            name = words[1]
            rest = words[2:]
            source = None
            if len(rest) >= 2 and rest[-2] == "from":
                source = rest.pop()
                rest.pop()
            scope = "all"
            if rest and rest[-1] in ("all", "existing", "new"):
                scope = rest.pop()
            count = int(rest[0]) if len(rest) > 0 else 1
            interval = float(rest[1]) if len(rest) > 1 else 1.0
            self._apply(_Mode(name, count, interval), scope, source)
            return "ok"
        if words[0] == "status":
            return json.dumps({"default": self._default.as_dict(),
                               "connections": [c.as_dict() for c in self._conns]})
        if words[0] == "quit":
            return "ok"
        return f"error unknown command {words[0]!r}"


def _address(text):
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1", int(port))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on")
    parser.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--control", type=int, default=0, help="control port (0: any free)")
    parser.add_argument("--mode", default="pass", choices=MODES)
    parser.add_argument("--keep-source", action="store_true",
                        help="connect upstream from each client's own IP")
    args = parser.parse_args(argv)
    upstream_host, upstream_port = _address(args.upstream)
    listen_host, listen_port = _address(args.listen)
    proxy = FaultProxy(upstream_port, upstream_host, listen_host, listen_port,
                       control_port=args.control, keep_source=args.keep_source).start()
    if args.mode != "pass":
        proxy.set_mode(args.mode)
    print(f"listening {proxy.port} control {proxy.control_port}", flush=True)
    try:
        proxy._thread.join()
    except KeyboardInterrupt:
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
