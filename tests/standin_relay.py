"""A stand-in for a site's own relay binary (`RELAY_KIND = exec` tests and bench).

Deliberately NOT stkrelay's relay code: a small independent asyncio program
(standard library only) that a site's `relay_server.exe` stands for.

    python tests/standin_relay.py --host 127.0.0.1 --port 9540 --passthrough-port 9541 \\
        --stats /tmp/standin.json [--listen-after S] [--exit-after S] [--starts FILE]

- `--port`: length-prefixed frames (4-byte big-endian length, then the body):
  every frame is echoed to its sender and copied to every other connection.
- `--passthrough-port`: raw bytes from a connection go to every other one.
- `--stats FILE`: JSON, replaced atomically whenever a count changed (at most
  every 20 ms) and at exit: ``{"pid", "argv", "received", "sent", "frames",
  "connections", "accepted", "first_received_at", "last_received_at"}`` — bytes
  received from and sent to clients on both ports, the times on CLOCK_MONOTONIC; ``%p``
  in FILE is its pid (a warm relay starts before any epoch could name it).
- `--listen-after S`: sleep S seconds before listening (a slow start);
  `--exit-after S`: exit with status 7 S seconds after listening (a crash);
  `--starts FILE`: append one line ``<pid> <monotonic>`` per start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import struct
import sys
import time

MAX_FRAME = 1 << 20


class Stats:
    def __init__(self, path: str | None) -> None:
        self.path = path.replace("%p", str(os.getpid())) if path else path
        self.doc = {"pid": os.getpid(), "argv": sys.argv[1:], "received": 0, "sent": 0, "frames": 0,
                    "connections": 0, "accepted": 0, "first_received_at": None,
                    "last_received_at": None}  # fmt: skip
        self.dirty = False

    def add(self, key: str, n: int = 1) -> None:
        self.doc[key] += n
        self.dirty = True

    def write(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f)
        os.replace(tmp, self.path)
        self.dirty = False

    async def keep_written(self) -> None:
        while True:
            if self.dirty:
                self.write()
            await asyncio.sleep(0.02)


class Relay:
    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.framed: set[asyncio.StreamWriter] = set()
        self.raw: set[asyncio.StreamWriter] = set()

    def received(self, n: int) -> None:
        self.stats.add("received", n)
        now = time.monotonic()
        if self.stats.doc["first_received_at"] is None:
            self.stats.doc["first_received_at"] = now
        self.stats.doc["last_received_at"] = now

    def send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if writer.is_closing():
            return
        writer.write(data)
        self.stats.add("sent", len(data))

    async def framed_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.serve(writer, self.framed, self.frames(reader, writer))

    async def raw_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def chunks():  # type: ignore[no-untyped-def]
            while data := await reader.read(65536):
                self.received(len(data))
                yield data, False

        await self.serve(writer, self.raw, chunks())

    async def frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):  # type: ignore[no-untyped-def]
        while True:
            head = await reader.readexactly(4)
            (size,) = struct.unpack(">I", head)
            if not 0 < size <= MAX_FRAME:
                return
            body = await reader.readexactly(size)
            self.received(4 + size)
            self.stats.add("frames")
            yield head + body, True

    async def serve(self, writer: asyncio.StreamWriter, group: set[asyncio.StreamWriter], items) -> None:  # type: ignore[no-untyped-def]
        group.add(writer)
        self.stats.add("connections")
        self.stats.add("accepted")
        try:
            async for data, echo in items:
                for other in list(group):
                    if other is not writer or echo:
                        self.send(other, data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            group.discard(writer)
            self.stats.add("connections", -1)
            writer.close()


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--passthrough-port", type=int, required=True)
    parser.add_argument("--stats")
    parser.add_argument("--listen-after", type=float, default=0.0)
    parser.add_argument("--exit-after", type=float, default=0.0)
    parser.add_argument("--starts")
    parser.add_argument("--epoch", default="")
    parser.add_argument("--kmsn", default="")
    args = parser.parse_args()
    if args.starts:
        with open(args.starts, "a") as f:
            f.write(f"{os.getpid()} {time.monotonic()}\n")
    stats = Stats(args.stats)
    stats.doc.update(epoch=args.epoch, kmsn=args.kmsn)
    stats.write()
    if args.listen_after:
        await asyncio.sleep(args.listen_after)
    stop = asyncio.Event()  # a SIGTERM from the moment it listens is a clean stop, never a traceback
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    relay = Relay(stats)
    framed = await asyncio.start_server(relay.framed_client, args.host, args.port, reuse_address=True)
    raw = await asyncio.start_server(relay.raw_client, args.host, args.passthrough_port, reuse_address=True)
    print(f"standin relay {os.getpid()} on {args.host}:{args.port} and :{args.passthrough_port}", flush=True)
    writer = asyncio.ensure_future(stats.keep_written())
    code = 0
    try:
        if args.exit_after:
            try:
                await asyncio.wait_for(stop.wait(), args.exit_after)
            except TimeoutError:
                code = 7
        else:
            await stop.wait()
    finally:
        writer.cancel()
        framed.close()
        raw.close()
        stats.write()
    return code


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
