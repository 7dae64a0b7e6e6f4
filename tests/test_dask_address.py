"""--dask and $DASK_SCHEDULER_ADDRESS (src/dask_address.py): every address that is not a Dask
scheduler's, whatever the server behind it does, ends each command that takes the option in one
line naming the input it came from, exit 2, nothing written; the wait is bounded by the commands
themselves, not by the server hanging up (issue 26 sections 2 and 6).

The servers are threads on 127.0.0.1 that hang up when the test ends (or after SAFETY_S): one that
accepts and never answers, one that answers garbage, one that sends a real scheduler's handshake
once and then goes silent. CONNECT_TIMEOUT_S is lowered to 1 s so the waits stay short."""
import socket
import struct
import threading

import msgpack
import pytest
from helpers import run_captured

from src import dask_address
from src.config import ConfigError
from src.dask_address import DaskAddress, dask_option, parse_handshake

SAFETY_S = 60.0  # a server hangs up by itself after this long, so no test can hang for good
# what distributed 2026.8.0's scheduler sends first on a connection (read off a real one): the
# 8-byte length 58, one frame of 42 bytes, the msgpack of Comm.handshake_info()
HANDSHAKE = msgpack.packb({"compression": None, "python": [3, 11, 7], "pickle-protocol": 5})
REAL = struct.pack("<QQQ", 16 + len(HANDSHAKE), 1, len(HANDSHAKE)) + HANDSHAKE


class Server:
    """Listens on 127.0.0.1; sends replies[i] on its i-th connection (nothing after the last) and
    keeps every connection open until stop(). `hung_up` is set when it stops: a command that
    returned before that gave up by itself."""

    def __init__(self, *replies: bytes):
        self.replies = list(replies)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.hung_up = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        self.timer = threading.Timer(SAFETY_S, self.stop)
        self.timer.daemon = True
        self.timer.start()

    def _serve(self):
        while not self.hung_up.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.replies:
                try:
                    conn.sendall(self.replies.pop(0))
                except OSError:
                    pass

    def stop(self):
        self.hung_up.set()
        self.timer.cancel()
        for s in [self.sock, *self.conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def serve_with(monkeypatch):
    monkeypatch.setattr(dask_address, "CONNECT_TIMEOUT_S", 1.0)
    servers = []

    def start(*replies):
        servers.append(Server(*replies))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


COMMANDS = {
    "plan": ["plan", "--gpus", "l4", "--pairs", "llama-3.1-8b+llama-3.2-1b", "--policies",
             "fixed:3", "--workloads", "alpaca", "--quiet"],
    "serve": ["serve", "--rates", "1", "--quiet", "--no-plots"],
    "study": ["--quiet", "--no-plots"],
}


def refused(tmp_path, command: str, *args: str) -> str:
    out = tmp_path / command
    done = run_captured([*COMMANDS[command], *args, "--out", str(out)])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and not out.exists(), done.stderr
    return lines[0][len("error: "):]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_server_that_accepts_and_never_answers(serve_with, tmp_path, command):
    """distributed's connect() awaits the handshake with no timeout: today's code waited until the
    server hung up (minutes in issue 26), and then blamed the connection."""
    server = serve_with()
    line = refused(tmp_path, command, "--dask", f"tcp://127.0.0.1:{server.port}")
    assert not server.hung_up.is_set()
    assert line == (f"--dask: tcp://127.0.0.1:{server.port} accepted the connection but sent no "
                    "Dask handshake within 1 s (a TLS scheduler needs tls://); start one "
                    "(`dask scheduler`), or use --dask local:N")


GARBAGE = {
    "http": (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
             "its first message states 3,543,824,036,068,086,856 bytes"),
    "0xff": (b"\xff" * 64, "its first message states 18,446,744,073,709,551,615 bytes"),
    "not msgpack": (struct.pack("<QQQ", 20, 1, 4) + b"\xc1\xc1\xc1\xc1",
                    "its first frame is not msgpack"),
    "a map of other keys": (struct.pack("<QQQ", 20, 1, 4) + msgpack.packb({"a": 1}),
                            "not a Dask handshake (a map with the keys compression, python, "
                            "pickle-protocol)"),
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_a_server_that_answers_garbage(serve_with, tmp_path, name):
    """Today: a numpy MemoryError traceback ("Unable to allocate 3.01 EiB") or a msgpack one."""
    reply, why = GARBAGE[name]
    server = serve_with(reply)
    line = refused(tmp_path, "plan", "--dask", f"127.0.0.1:{server.port}")
    assert line.startswith(f"--dask: 127.0.0.1:{server.port} answered, but not as a Dask "
                           "scheduler does: ") and why in line, line


def test_a_server_that_goes_silent_after_the_handshake(serve_with, tmp_path):
    """The check reads a real handshake; distributed's Client then connects again and gets
    nothing: its thread is given up after CONNECT_TIMEOUT_S + GRACE_S, the server still up."""
    server = serve_with(REAL)
    line = refused(tmp_path, "plan", "--dask", f"tcp://127.0.0.1:{server.port}")
    assert not server.hung_up.is_set()
    assert line.startswith(f"--dask: the Dask scheduler at tcp://127.0.0.1:{server.port} did not "
                           "finish connecting within 2 s"), line


def test_the_environment_variable_is_named(serve_with, tmp_path, monkeypatch):
    server = serve_with()
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", f"tcp://127.0.0.1:{server.port}")
    line = refused(tmp_path, "study")
    assert line.startswith(f"DASK_SCHEDULER_ADDRESS: tcp://127.0.0.1:{server.port} accepted the "
                           "connection but sent no Dask handshake"), line
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:9")  # nothing listens on 9
    line = refused(tmp_path, "serve")
    assert line.startswith("DASK_SCHEDULER_ADDRESS: no Dask scheduler answered at "
                           "tcp://127.0.0.1:9 within 1 s"), line
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:70000")
    assert refused(tmp_path, "plan") == ("DASK_SCHEDULER_ADDRESS: 'tcp://127.0.0.1:70000': the "
                                         "port must be 1..65535")


@pytest.mark.parametrize("port", ["0", "70000", "9" * 300, "080000"])
def test_a_port_outside_1_to_65535(tmp_path, port):
    """A 300-digit port was an OverflowError traceback from socket.getaddrinfo."""
    line = refused(tmp_path, "plan", "--dask", f"tcp://127.0.0.1:{port}")
    assert line.startswith("--dask: 'tcp://127.0.0.1:") and line.endswith(
        "': the port must be 1..65535"), line


@pytest.mark.parametrize("value", ["local:٣", "local:²", "local:３", "tcp://127.0.0.1:８７８６",
                                   "tcp://127.0.0.1", "local:99999999999999999999"])
def test_ascii_digits_and_a_port_are_required(value):
    """local:٣ ran a 3-worker cluster (re's \\d and int() read any Unicode digit)."""
    with pytest.raises(ConfigError, match="^--dask: ") as e:
        dask_option(value)
    assert "\n" not in str(e.value)


def test_what_dask_option_returns(monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    assert dask_option(None) is None
    assert dask_option(" local:2 ") == DaskAddress("local:2", "--dask", local_workers=2)
    assert dask_option("tcp://[::1]:8786") == DaskAddress("tcp://[::1]:8786", "--dask",
                                                          host="::1", port=8786)
    assert dask_option("tls://sched.example.org:8786").scheme == "tls"
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "10.0.0.5:8786")
    assert dask_option(None) == DaskAddress("10.0.0.5:8786", "DASK_SCHEDULER_ADDRESS",
                                            host="10.0.0.5", port=8786)


def test_the_real_handshake_parses():
    assert parse_handshake(REAL[8:])["pickle-protocol"] == 5
