"""The supervisor's ping of its Redis without redis-py (`ports.local.redis_info`, issue 41),
against a real redis-server with a password, on a loopback port and a unix socket."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import free_port, wait_until

from elections.errors import RedisUnavailable
from elections.ports.local.redis_info import RedisPlace
from elections.ports.local.redis_link import RedisLink

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "s3cret-pw"


@pytest.fixture
def guarded(tmp_path):
    """(port, unix socket path) of a redis-server that wants PASSWORD."""
    exe = shutil.which("redis-server")
    assert exe, "redis-server is missing: run `make test` (it installs it)"
    port, sock = free_port(), tmp_path / "redis.sock"
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--unixsocket", str(sock), "--save", "",
            "--appendonly", "no", "--requirepass", PASSWORD, "--dir", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(sock.exists, 10, "redis-server's unix socket")
        yield port, sock
    finally:
        proc.kill()
        proc.wait(10)


def _run_id_by_redis_py(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return str(client.info("server")["run_id"])
    finally:
        client.close()


def test_the_run_id_is_redis_pys_by_password_by_user_and_by_unix_socket(guarded):
    port, sock = guarded
    expected = _run_id_by_redis_py(f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    assert len(expected) == 40
    for url in (f"redis://:{PASSWORD}@127.0.0.1:{port}/0", f"redis://default:{PASSWORD}@127.0.0.1:{port}/2",
                f"unix://{sock}?password={PASSWORD}", f"unix://:{PASSWORD}@{sock}"):  # fmt: skip
        assert RedisLink(url).ping() == expected, url


def test_a_wrong_or_missing_password_is_the_servers_reason_without_the_password(guarded):
    port, _sock = guarded
    with pytest.raises(RedisUnavailable) as wrong:
        RedisLink(f"redis://:not-{PASSWORD}@127.0.0.1:{port}/0").ping()
    assert "WRONGPASS" in str(wrong.value) and PASSWORD not in str(wrong.value)
    with pytest.raises(RedisUnavailable, match="NOAUTH"):
        RedisLink(f"redis://127.0.0.1:{port}/0").ping()


def test_a_listener_that_is_no_redis_is_a_reason_never_a_hang_or_another_exception(tmp_path):
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"$99999999999\r\n")  # a bulk string too long to be a Redis's INFO

    threading.Thread(target=answer, daemon=True).start()
    with server, pytest.raises(RedisUnavailable, match="unexpected reply"):
        RedisLink(f"redis://127.0.0.1:{port}/0", timeout=5).ping()


def test_a_url_is_read_as_redis_py_reads_it():
    assert RedisPlace.of("redis://127.0.0.1:6380/0").port == 6380
    assert RedisPlace.of("redis://h").port == 6379
    assert RedisPlace.of("redis://u:p%40ss@[::1]:7000").password == "p@ss"
    assert RedisPlace.of("unix:///run/r.sock?db=1").path == "/run/r.sock"
    for bad, words in (("http://127.0.0.1:6379", "must specify one of the following schemes"),
                       ("redis://127.0.0.1:notaport/0", "Port could not be cast")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            RedisPlace.of(bad)


def test_the_supervisors_ping_loads_no_redis_py(guarded):
    port, _sock = guarded
    code = (f"import sys; from elections.ports.local.redis_link import RedisLink; "
            f"RedisLink('redis://:{PASSWORD}@127.0.0.1:{port}/0').ping(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis'))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout
