"""A run's Dask address: checked once at the edge (dask_option), and connected to with every wait
bounded (connect_client).

dask_option reads --dask, else $DASK_SCHEDULER_ADDRESS, and returns a DaskAddress that remembers
which of the two gave it, so every later error names the input the user has to fix.

connect_client: distributed's own connect() (distributed 2026.8.0, distributed/comm/core.py)
bounds the TCP connect by its timeout but then awaits the scheduler's handshake with no timeout,
and sizes its read buffer from the peer's first 8 bytes: a server that accepts and never answers
hangs the run until it hangs up, and one that answers garbage raises whatever numpy does with a
length of 3 EiB. So before distributed sees a tcp:// address, scheduler_handshake reads that
handshake itself, on a plain socket with a deadline, and checks its shape (HANDSHAKE_MAX_BYTES,
HANDSHAKE_KEYS); then distributed.Client starts in a daemon thread that is waited for at most
CONNECT_TIMEOUT_S more, so nothing a server does (or a DNS lookup that never returns) can hold a
run longer than 2 x (CONNECT_TIMEOUT_S + GRACE_S), 12 s: it ends in one ConfigError line.
"""
from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass

from src.config import ConfigError

CONNECT_TIMEOUT_S = 5.0  # how long a --dask address gets to answer
GRACE_S = 1.0  # on top of CONNECT_TIMEOUT_S, for each step of connect_client
DASK_ENV = "DASK_SCHEDULER_ADDRESS"
MAX_LOCAL_WORKERS = 256
_LOCAL = re.compile(r"local:([0-9]+)")  # [0-9], not \d: ASCII digits only (src/errors.py)
# [SCHEME://]HOST:PORT: a host name or IPv4 address (at most 253 characters, DNS's limit), or an
# IPv6 address in brackets; the port is required (distributed refuses an address without one)
_ADDRESS = re.compile(r"(?:(tcp|tls|ucx|ws|wss)://)?(?:\[([0-9A-Fa-f:.]{2,45})\]|"
                      r"([A-Za-z0-9._\-]{1,253})):([0-9]+)")


@dataclass(frozen=True)
class DaskAddress:
    """Where a run's work goes on Dask, checked (dask_option), and the input that said so: the
    --dask option or the DASK_SCHEDULER_ADDRESS environment variable, the field its errors name."""

    address: str  # "local:N", or a scheduler's [SCHEME://]HOST:PORT
    source: str = "--dask"  # "--dask" or DASK_ENV
    local_workers: int | None = None  # N of local:N; None for a scheduler address
    host: str = ""  # a scheduler address's host ("::1" for [::1]) and port
    port: int = 0
    scheme: str = "tcp"


def _shown(value: str, most: int = 60) -> str:
    return value if len(value) <= most else value[:most - 3] + "..."


def dask_option(value: str | None) -> DaskAddress | None:
    """The --dask value, else $DASK_SCHEDULER_ADDRESS, else None (local processes); checked:
    local:N with N in 1..MAX_LOCAL_WORKERS, or [SCHEME://]HOST:PORT with PORT in 1..65535, ASCII
    digits only (a Unicode digit such as '٣' or '²' is refused, not read as 3 or 2)."""
    if value is None:
        value = os.environ.get(DASK_ENV) or None
        source = DASK_ENV
    else:
        source = "--dask"
    if value is None:
        return None
    value = value.strip()
    m = _LOCAL.fullmatch(value)
    if m:
        n = int(m.group(1)) if len(m.group(1)) <= 4 else MAX_LOCAL_WORKERS + 1
        if not 1 <= n <= MAX_LOCAL_WORKERS:
            raise ConfigError(source,
                              f"{_shown(value)}: allowed local:1..local:{MAX_LOCAL_WORKERS}")
        return DaskAddress(value, source, local_workers=n)
    m = _ADDRESS.fullmatch(value)
    if value.startswith("local") or not m:
        raise ConfigError(source, f"'{_shown(value)}' is neither local:N (N worker processes here) "
                                  "nor a scheduler address HOST:PORT such as tcp://127.0.0.1:8786")
    scheme, host, port = m.group(1) or "tcp", m.group(2) or m.group(3), m.group(4)
    if len(port) > 5 or not 1 <= int(port) <= 65535:
        raise ConfigError(source, f"'{_shown(value)}': the port must be 1..65535")
    return DaskAddress(value, source, host=host, port=int(port), scheme=scheme)


HANDSHAKE_MAX_BYTES = 64 * 1024  # a scheduler's handshake is 58 bytes after its 8-byte length
HANDSHAKE_KEYS = ("compression", "python", "pickle-protocol")  # Comm.handshake_info()
_LENGTH = struct.Struct("<Q")  # distributed's struct "Q": native order, little-endian on x86/ARM


class _NotDask(Exception):
    """The server answered, but not the way a Dask scheduler does; str() says how."""


class _Silent(Exception):
    """The server accepted the connection and then sent too little before the deadline."""


def _recv_exactly(sock: socket.socket, n_bytes: int, deadline: float) -> bytes:
    """n_bytes from sock before time.monotonic() reaches deadline, else _Silent."""
    buf = bytearray()
    while len(buf) < n_bytes:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            raise _Silent()
        sock.settimeout(left_s)
        try:
            chunk = sock.recv(n_bytes - len(buf))
        except TimeoutError:
            raise _Silent() from None
        if not chunk:
            raise _NotDask(f"it closed the connection after {len(buf)} bytes")
        buf += chunk
    return bytes(buf)


def parse_handshake(message: bytes) -> dict:
    """The handshake dict of a scheduler's first message after its 8-byte length, or _NotDask.

    The message is a frame list (distributed/protocol/utils.py pack_frames_prelude): the number of
    frames k, k frame lengths (each an 8-byte unsigned integer), then the frames; frame 0 is the
    msgpack of the dict Comm.handshake_info() returns (distributed/protocol/core.py dumps)."""
    import msgpack

    if len(message) < 16:
        raise _NotDask(f"its first message is {len(message)} bytes, too short for a frame list")
    (k,) = _LENGTH.unpack_from(message)
    if not 1 <= k <= 16 or len(message) < 8 * (k + 1):
        raise _NotDask(f"its first message states {k} frames")
    lengths = struct.unpack_from(f"<{k}Q", message, 8)
    if 8 * (k + 1) + sum(lengths) != len(message):
        raise _NotDask("its first message's frame lengths do not add up to its length")
    start = 8 * (k + 1)
    try:
        info = msgpack.unpackb(message[start:start + lengths[0]], raw=False)
    except Exception as e:  # msgpack's errors for bytes that are not msgpack: ValueError & co.
        raise _NotDask(f"its first frame is not msgpack ({type(e).__name__})") from None
    if not isinstance(info, dict) or not all(key in info for key in HANDSHAKE_KEYS):
        raise _NotDask("its first message is not a Dask handshake (a map with the keys "
                       f"{', '.join(HANDSHAKE_KEYS)})")
    return info


def scheduler_handshake(host: str, port: int, timeout_s: float) -> dict:
    """The handshake a Dask scheduler sends first on a new TCP connection (before it reads
    anything), read within timeout_s, connect included: OSError if nothing accepts the
    connection, _Silent if it sends too little, _NotDask if what it sends is not a handshake
    (distributed/comm/tcp.py TCP.read: an 8-byte length, then that many bytes; refused above
    HANDSHAKE_MAX_BYTES)."""
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        (n_bytes,) = _LENGTH.unpack(_recv_exactly(sock, 8, deadline))
        if n_bytes > HANDSHAKE_MAX_BYTES:
            raise _NotDask(f"its first message states {n_bytes:,} bytes, where a scheduler's "
                           f"handshake is under {HANDSHAKE_MAX_BYTES:,}")
        return parse_handshake(_recv_exactly(sock, n_bytes, deadline))


def _why(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:120]


def connect_client(dask: DaskAddress):
    """distributed.Client connected to dask's scheduler, or ConfigError(dask.source, ...) in one
    line. Two steps, each waited for at most CONNECT_TIMEOUT_S + GRACE_S in a daemon thread (one
    still stuck when the run gives up does not keep the process from exiting): for tcp://,
    scheduler_handshake (a tls:// or ws:// scheduler starts with its own TLS or HTTP handshake:
    only the second step's bound covers it), then Client(timeout=CONNECT_TIMEOUT_S), whose own
    timeout covers its connection attempts but not the handshake that follows each."""
    from distributed import Client  # before the clock starts: importing it takes a while

    timeout_s, wait_s = CONNECT_TIMEOUT_S, CONNECT_TIMEOUT_S + GRACE_S
    result: dict = {}
    checked, done = threading.Event(), threading.Event()

    def attempt():
        try:
            if dask.scheme == "tcp":
                scheduler_handshake(dask.host, dask.port, timeout_s)
            checked.set()
            result["client"] = Client(dask.address, timeout=timeout_s)
        except BaseException as e:  # reported by the waiting thread, in one line
            result["error"] = e
        finally:
            checked.set()
            done.set()

    threading.Thread(target=attempt, name="dask-connect", daemon=True).start()
    if checked.wait(wait_s):
        done.wait(wait_s)
    if "client" in result:
        return result["client"]
    e = result.get("error")
    hint = "start one (`dask scheduler`), or use --dask local:N"
    if e is None and not checked.is_set():  # the lookup of the host name did not return
        raise ConfigError(dask.source, f"no Dask scheduler answered at {dask.address} within "
                                       f"{wait_s:g} s; {hint}")
    if e is None:
        raise ConfigError(dask.source, f"the Dask scheduler at {dask.address} did not finish "
                                       f"connecting within {wait_s:g} s; {hint}")
    if isinstance(e, _NotDask):
        raise ConfigError(dask.source, f"{dask.address} answered, but not as a Dask scheduler "
                                       f"does: {e}")
    if isinstance(e, _Silent):
        raise ConfigError(dask.source, f"{dask.address} accepted the connection but sent no Dask "
                                       f"handshake within {timeout_s:g} s (a TLS scheduler "
                                       "needs tls://); " + hint)
    raise ConfigError(dask.source, f"no Dask scheduler answered at {dask.address} within "
                                   f"{timeout_s:g} s ({_why(e)}); {hint}")
