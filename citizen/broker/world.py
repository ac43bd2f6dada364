"""The Thought World's approved actions, carried out by the broker (issue 28, break 3).

The world repository belongs to the broker's user: the executor asks
(`POST /v1/experience/world/execute {proposal}`), the broker re-derives from the
proposal's records that the execution is owed and is the caller's, runs exactly the
voted actions and commits; the verifier asks for the revert of that commit
(`POST /v1/experience/world/revert {proposal}`) when the outcomes do not hold. Each
round runs once: the result is kept in the broker's state directory and a repeated
request gets it back instead of running the actions again.

A `run` action runs in bubblewrap as `nobody` in a user namespace of its own: the
system read-only, the world's work tree writable but never its `.git`, /home, the
commons, /etc/experience, the broker's state and sockets gone, no network, rlimits,
nothing left running; its output capped, and redacted (every citizen's secret the
broker knows, anything shaped like a key) before it goes back into a shared record.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from citizen import config
from citizen.broker import repos
from citizen.broker.gateway import Gateway
from citizen.broker.refused import Refused
from citizen.broker.server import Broker, route
from citizen.config import paths
from citizen.config.secrets import MIN_SECRET, parse_env, secrets_file
from citizen.tools import sandbox
from shared import gitsafe
from shared.atomic import CorruptFile, read_json, write_json
from shared.commons import Commons
from shared.consensus import Consensus
from shared.consensus.world import OUTPUT_CHARS, RUN_TIMEOUT_S, ActionError
from shared.errors import SharedError

NOBODY = 65534  # who a command is inside its namespace: no file of anyone's is its own
OUTPUT_BYTES = 1 << 20  # what of a command's output is read at all
PATH = "/usr/local/bin:/usr/bin:/bin"
# Shaped like a credential, whoever's: keys, tokens, passwords, private keys.
_SHAPES = (re.compile(r"sk-[A-Za-z0-9_-]{16,}"),
           re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
                      re.S),
           re.compile(r"(?i)\b((?:api[_-]?key|password|passwd|pass|secret|token)\w*\s*[=:]\s*)"
                      r"\S+"))


def redact(text: str, server_mode: bool) -> str:
    """`text` without a secret the broker knows or anything shaped like one."""
    for name in repos.citizens(server_mode):
        found = secrets_file(name)
        try:
            values = parse_env(found).values() if found else ()
        except (OSError, ValueError):
            values = ()
        for value in values:
            if len(value) >= MIN_SECRET:
                text = text.replace(value, "[redacted]")
    text = _SHAPES[0].sub("[redacted]", text)
    text = _SHAPES[1].sub("[redacted private key]", text)
    return _SHAPES[2].sub(lambda m: m.group(1) + "[redacted]", text)


def _hidden() -> list[str]:
    """What a command must not see: secrets, the broker's state, the homes, sockets."""
    places = ["/tmp", "/run", "/home", str(paths.civ_root()), str(paths.broker_state()),  # noqa: S108
              "/etc/experience", str(paths.operator_dir()),
              os.environ.get("CREDENTIALS_DIRECTORY", "")]
    args: list[str] = []
    for place in dict.fromkeys(p for p in places if p and Path(p).is_dir()):
        args += ["--tmpfs", place]  # empty, and what is written there vanishes
    return args


def boxed(command: str, world: Path) -> list[str]:
    """The argv that runs `command` in the world's sandbox (module doc)."""
    limits = sandbox.Limits(cpu_s=RUN_TIMEOUT_S)
    limited = ["prlimit", f"--cpu={limits.cpu_s}", f"--as={limits.memory}",
               f"--fsize={limits.file_size}", f"--nproc={limits.processes}", "--"]
    if sandbox.mode() == "off":  # a developer's explicit choice; never on a server
        return [*limited, "bash", "-c", command]
    binary, why = sandbox.bwrap(), sandbox.problem()
    if binary is None or why:
        raise ActionError(f"run: {why}; an approved command runs only in bubblewrap")
    w = str(world)
    return [*limited, binary, "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY),
            "--ro-bind", "/", "/", *_hidden(),
            "--bind", w, w,  # the work tree: the one writable place ...
            "--ro-bind", f"{w}/.git", f"{w}/.git",  # ... but never its config, hooks, refs
            "--proc", "/proc", "--dev", "/dev",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
            "--die-with-parent", "--new-session", "--chdir", w, "--", "bash", "-c", command]


def run_boxed(command: str, world: Path) -> str:
    """Run an approved command in the world's sandbox; its output, capped.

    :raises ActionError: it failed, timed out, or cannot be boxed here.
    """
    env = {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8",  # noqa: S108 - the sandbox's
           # a git the command runs: no hook, fsmonitor, pager or home config either
           **gitsafe.FIXED_ENV, **gitsafe.environment(world)}
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(boxed(command, world), stdin=subprocess.DEVNULL, stdout=out,
                                  stderr=subprocess.STDOUT, env=env, cwd=world,
                                  timeout=RUN_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ActionError(f"run: timed out after {RUN_TIMEOUT_S} s") from exc
        out.seek(0)
        text = out.read(OUTPUT_BYTES).decode(errors="replace")
    result = f"exit code {done.returncode}\n{text}"[:OUTPUT_CHARS]
    if done.returncode != 0:
        raise ActionError(result)
    return result


def consensus(broker: Broker, citizen: str) -> Consensus:
    """The protocol as the broker reads it for `citizen`'s step: its own list of citizens
    (on several servers the civilization's, and the proposal's records in its database,
    through its own pool: `gateway.Gateway`), the release's values, authorship enforced
    on a server, commands run in its sandbox."""
    tpl = config.templates()
    far = Gateway(broker, citizen) if broker.database is not None else None
    names = sorted(far.citizens()) if far is not None else repos.citizens(broker.server_mode)
    commons = Commons(paths.shared_dir(), names, broker.server_mode, tpl.dir / "values.yaml",
                      {n: tpl.values_profile(n) for n in names},
                      medium_programs=config.medium_programs(), remote=far)
    c = commons.consensus
    c.world.runner = run_boxed
    return c


def _done_path(pid: str, round_: int) -> Path:
    return paths.broker_state() / "world" / f"{pid}-{round_:02d}.json"


def _recalled(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (FileNotFoundError, CorruptFile):
        return None
    return data if isinstance(data, dict) else None


def _keep(path: Path, done: dict[str, Any]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the broker's alone
    write_json(path, done, mode=0o600)


@route("POST", "/v1/experience/world/execute")
def execute(broker: Broker, citizen: str, body: bytes) -> tuple[int, Any]:
    pid = repos.field(body, "proposal")
    c = consensus(broker, citizen)
    with repos.LOCK:
        try:
            d = c.owing(pid, citizen, "execute")
            path = _done_path(pid, d.round)
            done = _recalled(path)
            if done is None:  # each round runs once, however often it is asked for
                done = c.carry_out(pid, citizen)
                for result in done["results"]:
                    result["output"] = redact(str(result["output"]), broker.server_mode)
                done["error"] = redact(str(done["error"]), broker.server_mode)
                _keep(path, done)
        except (SharedError, OSError) as exc:
            raise repos.refusal(exc) from exc
    return 200, done


@route("POST", "/v1/experience/world/revert")
def revert(broker: Broker, citizen: str, body: bytes) -> tuple[int, Any]:
    pid = repos.field(body, "proposal")
    c = consensus(broker, citizen)
    with repos.LOCK:
        try:
            d = c.owing(pid, citizen, "check")
            path = _done_path(pid, d.round)
            done = _recalled(path)
            if not done or not done.get("commit"):
                raise Refused(409, "invalid_request_error", f"the broker made no commit for "
                              f"{pid} round {d.round}: there is nothing to revert")
            if not done.get("reverted"):
                done["reverted"] = c.world.revert(str(done["commit"]), citizen)
                _keep(path, done)
        except (SharedError, OSError) as exc:  # ActionError: later changes conflict
            raise repos.refusal(exc) from exc
    return 200, {"reverted": done["reverted"]}
