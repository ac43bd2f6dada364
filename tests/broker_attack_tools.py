"""The tools of tests/test_hostile_broker_attacks.py: the scripts a citizen's user runs
against the broker's socket (a raw request, an SDK call, idle connections, bloated bodies,
a passed descriptor), running them as that user, and reading what the broker spent and
how it fares; and a Messages API stand-in that keeps each request's bytes."""

from __future__ import annotations

import io
import json
from typing import Any, BinaryIO

from tests.anthropic_server import MessagesServer
from tests.nspawn import PYTHON, Container, until

SOCK = "/run/experience-broker/broker.sock"
OPUS, HAIKU = "claude-opus-4-6", "claude-haiku-4-5"  # both in every default council

# A wake permit held by the script that runs after it (its model calls need one, as a
# wake's run under its daemon's), asked as a rewritten daemon can ask, naming CLAIM if
# set: when none comes, the refusal is printed as a call's would be and the script ends.
PERMIT = r"""
import socket, sys
held = socket.socket(socket.AF_UNIX)
held.connect("/run/experience-broker/broker.sock")
held.sendall(b"POST /v1/experience/permit HTTP/1.1\r\nHost: broker\r\n"
             + (f"x-experience-citizen: {CLAIM}\r\n".encode() if CLAIM else b"")
             + b"Content-Length: 0\r\n\r\n")
got = b""
while b'"granted"' not in got and (chunk := held.recv(4096)):
    got += chunk
if b'"granted"' not in got:
    head, _, body = got.partition(b"\r\n\r\n")
    print(head.split(b" ")[1].decode(), body.decode(errors="replace")[:300])
    sys.exit()
"""


def permitted(script: str, claim: str = "''") -> str:
    """`script` run under its caller's wake permit (`claim`: a Python expression naming
    the citizen it asks for; '' - the kernel names it)."""
    return f"CLAIM = {claim}\nexec({PERMIT!r})\n{script}"


# One request on a raw connection, as a rewritten daemon can send it: argv is the body
# (JSON text, sent byte for byte), then header lines "name: value". Prints the status
# line and the body.
RAW = r"""
import socket, sys
body = sys.argv[1].encode()
extra = "".join(h + "\r\n" for h in sys.argv[2:])
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect("/run/experience-broker/broker.sock")
s.sendall((f"POST /v1/messages HTTP/1.1\r\nHost: broker\r\ncontent-type: application/json\r\n"
           f"anthropic-version: 2023-06-01\r\n{extra}content-length: {len(body)}\r\n\r\n"
           ).encode() + body)
out = b""
try:
    while chunk := s.recv(65536):
        out += chunk
        head, _, rest = out.partition(b"\r\n\r\n")
        if b"content-length:" in head.lower():
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(rest) >= n:
                break
except OSError as exc:
    print("ERROR", exc)
status = out.split(b"\r\n", 1)[0].decode(errors="replace")
code = status.split(" ", 2)[1] if status.count(" ") >= 2 else "none"
print(code, out.partition(b"\r\n\r\n")[2][:400].decode(errors="replace"))
"""

# A model call through the SDK's transport with a short timeout (argv: timeout, body).
CALL = """
import json, sys, httpx2
t = httpx2.HTTPTransport(uds="/run/experience-broker/broker.sock")
try:
    with httpx2.Client(transport=t, base_url="http://broker", timeout=float(sys.argv[1])) as c:
        r = c.post("/v1/messages", json=json.loads(sys.argv[2]),
                   headers={"anthropic-version": "2023-06-01"})
    print(r.status_code, r.text[:300])
except Exception as exc:
    print("FAILED", type(exc).__name__, exc)
"""

RAW, CALL = permitted(RAW), permitted(CALL)

# Opens as many idle connections to the broker as it can (raising its own descriptor
# limit first), says so in ~/held, and keeps them - sending nothing - until stopped.
IDLE = """
import resource, socket, time, pathlib
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
held, last = [], time.monotonic()
while len(held) < 3000 and time.monotonic() - last < 5:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(1.0)
    try:
        s.connect("/run/experience-broker/broker.sock")
    except OSError:  # the backlog is full for now (EAGAIN): again, until 5 s of none
        s.close()
        time.sleep(0.02)
        continue
    held.append(s)
    last = time.monotonic()
pathlib.Path.home().joinpath("held").write_text(str(len(held)))
time.sleep(600)
"""

# Sends `n` requests of `size` bytes at once, each a JSON object that parses to millions
# of empty lists (≈26 bytes of Python objects per byte sent), and waits for the answers.
BLOAT = r"""
import socket, sys, threading
n, size = int(sys.argv[1]), int(sys.argv[2])
head = b'{"model":"claude-opus-4-6","max_tokens":1,"messages":['
count = (size - len(head) - 4) // 3
body = head + b"[]," * count + b"[]]}"
out = []
def one():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    try:
        s.connect("/run/experience-broker/broker.sock")
        s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: broker\r\ncontent-length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        out.append(s.recv(100).split(b"\r\n")[0].decode())
    except OSError as exc:
        out.append(type(exc).__name__)
ts = [threading.Thread(target=one) for _ in range(n)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sorted(out))
"""

BLOAT = permitted(BLOAT)

# opus connects to the broker, then hands the connected socket to whoever connects to
# /tmp/pass.sock (SCM_RIGHTS); mira asks whoami on the descriptor it was given.
GIVE_FD = """
import os, socket
broker = socket.socket(socket.AF_UNIX)
broker.connect("/run/experience-broker/broker.sock")
lst = socket.socket(socket.AF_UNIX)
if os.path.exists("/tmp/pass.sock"):
    os.unlink("/tmp/pass.sock")
lst.bind("/tmp/pass.sock")
os.chmod("/tmp/pass.sock", 0o777)
lst.listen(1)
lst.settimeout(60)
conn, _ = lst.accept()
socket.send_fds(conn, [b"x"], [broker.fileno()])
conn.recv(1)
"""
TAKE_FD = """
import socket, time
for _ in range(100):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect("/tmp/pass.sock")
        break
    except OSError:
        time.sleep(0.1)
_, fds, _, _ = socket.recv_fds(s, 1, 1)
b = socket.socket(fileno=fds[0])
b.sendall(b"GET /v1/experience/whoami HTTP/1.1\\r\\nHost: broker\\r\\n"
          b"Connection: close\\r\\n\\r\\n")
out = b""
while chunk := b.recv(4096):
    out += chunk
print(out.partition(b"\\r\\n\\r\\n")[2].decode())
s.send(b"x")
"""


class RawMessagesServer(MessagesServer):
    """The Messages API stand-in, also keeping each request's bytes as they came."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []
        parsed: Any = self.httpd.RequestHandlerClass  # MessagesServer's, built at run time
        recorder = self

        class Handler(parsed):  # type: ignore[misc]  # mypy takes no base class from a variable
            rfile: BinaryIO  # StreamRequestHandler's, which mypy cannot see through `parsed`

            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("content-length", 0)))
                recorder.raw.append(data)
                self.rfile = io.BytesIO(data)
                super().do_POST()

        self.httpd.RequestHandlerClass = Handler


def as_user(box: Container, user: str, *cmd: str, timeout: float = 600.0) -> str:
    """Run as `user` through systemd, outside any unit's sandbox."""
    done = box.run("systemd-run", "--wait", "--pipe", "--quiet", "-p", f"User={user}", *cmd,
                   check=False, timeout=timeout)
    return done.stdout + done.stderr


def raw_call(box: Container, user: str, body: str | dict[str, Any], *headers: str) -> str:
    data = body if isinstance(body, str) else json.dumps(body)
    return as_user(box, user, PYTHON, "-c", RAW, data, *headers)


def call(model: str = OPUS, max_tokens: int = 50, **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hi"}], **extra}


def model_of(box: Container, name: str) -> tuple[str, dict[str, float]]:
    """The first model of `name`'s council in the release, and its prices per Mtok."""
    release = "/opt/experience/release/templates"
    data = json.loads(box.run("cat", f"{release}/citizen_configs.json").stdout)
    seats = data["citizens"].get(name, {}).get("council") or data["defaults"]["council"]
    model = str(seats[0]["model"])
    prices = json.loads(box.run("cat", f"{release}/models.json").stdout)
    return model, prices["prices_usd_per_mtok"][model]


def spent_today(box: Container, name: str) -> float:
    rows = json.loads(box.run("citizen", "spend", "--json").stdout)
    return float(sum(r["usd"] for r in rows if r["citizen"] == name))


def broker_pid(box: Container) -> str:
    return box.run("systemctl", "show", "-p", "MainPID", "--value",
                   "experience-broker").stdout.strip()


def broker_status(box: Container, field: str) -> int:
    """A field of /proc/<broker>/status in kB (VmHWM, VmRSS) or as a count (Threads)."""
    status = box.run("cat", f"/proc/{broker_pid(box)}/status").stdout
    line = next(v for v in status.splitlines() if v.startswith(field + ":"))
    return int(line.split()[1])


def restart_broker(box: Container) -> None:
    box.run("systemctl", "restart", "experience-broker")
    until(lambda: box.run("test", "-S", SOCK, check=False).returncode == 0)
