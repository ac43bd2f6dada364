"""Findings 2 and 8 on a booted server, with real Unix users: mira (a citizen) poisons the
shared histories, plants and moves proposals' views and links a room document to a
root-only file; root's `citizen proposal approve|reject`, its queue and its presence mark
are neither blocked, steered nor led through a link. Each failed on the code before
(RecursionError, MemoryError, a queue without the moved proposal, the root-only file's
words written out 0664)."""

from __future__ import annotations

import json

from tests.hostile_door.conftest import as_root, as_user
from tests.nspawn import PYTHON, Container
from tests.thoughtworld import proposal, vote

SHARED = "/home/shared"
HISTORY = f"{SHARED}/values/weight_history.jsonl"
CANARY = "root-only-canary-5e21"
RELEASE = "/opt/experience/release"  # root's code
PRELUDE = ("import json; from citizen import civilization, config; "
           "c = civilization.consensus(config.templates()); ")


def step(box: Container, name: str, code: str) -> str:
    """Python as citizen `name`, running its own code (as its units do)."""
    return box.run("runuser", "-u", name, "--", "env", f"PYTHONPATH=/home/{name}/code",
                   PYTHON, "-c", PRELUDE + code).stdout


def waiting_for_a_person(box: Container, task: str) -> str:
    """A high-stakes proposal the council approved, as the citizens' own processes take
    the steps: it waits for root."""
    out = as_root(box, f"citizen consensus start --by opus {json.dumps(task)}")
    pid = out.split()[1].rstrip(":")
    roles = json.loads(step(box, "opus", f"print(json.dumps(c.load('{pid}').roles))"))
    body = json.dumps(proposal(tool="delete_file", path="README.md", content=""))
    step(box, "opus", f"c.propose('{pid}', 'opus', json.loads({body!r}))")
    ok = f"json.loads({json.dumps(vote('approve', 'README.md may be needed'))!r})"
    step(box, roles["verifier"], f"c.verify('{pid}', '{roles['verifier']}', {ok})")
    phase = step(box, roles["integrator"], f"print(c.integrate('{pid}', "
                 f"'{roles['integrator']}', {ok}).phase)").strip()
    assert phase == "human", phase
    return pid


def queue(box: Container) -> list[str]:
    rows = json.loads(as_root(box, "citizen proposal list --human --json"))
    return sorted(str(r["id"]) for r in rows)


def decided(box: Container, pid: str) -> dict[str, object]:
    return dict(json.loads(as_root(box, f"cat {SHARED}/proposals/records/{pid}/human.json")))


def test_poisoned_histories_and_planted_views_neither_block_nor_steer_a_decision(
        box: Container) -> None:
    first, second, third = (waiting_for_a_person(box, f"Remove README.md, take {n}")
                            for n in (1, 2, 3))
    try:
        # A planted view, and a real one moved (or, the folder sticky, at least tried).
        as_user(box, "mira", f"echo '{{\"id\": \"prop-x\", \"phase\": \"human\"}}' > "
                f"{SHARED}/proposals/pending/prop-x.json; "
                f"mv {SHARED}/proposals/pending/{third}.json {SHARED}/proposals/rejected/ "
                "|| true", check=False)
        assert queue(box) == sorted([first, second, third])
        facts = json.loads(box.run(  # the Decisions page's queue, from root's release
            "env", f"PYTHONPATH={RELEASE}", PYTHON, "-c", "import json; from citizen.web.facts "
            "import decisions; print(json.dumps(decisions.waiting_for_a_person()))").stdout)
        assert sorted(i["id"] for i in facts["items"]) == sorted([first, second, third])
        assert facts["unreadable"] == []

        # One line of 100,000 '[' in the weight history: root approves all the same.
        as_user(box, "mira", f"python3 -c \"open('{HISTORY}', 'a').write('[' * 100000 + "
                "chr(10))\"")
        as_root(box, f"citizen proposal approve {first} --why 'looked at it'")
        assert decided(box, first)["decision"] == "approve"

        # The history truncated to a sparse terabyte: root rejects all the same.
        as_user(box, "mira", f"truncate -s 1T {HISTORY}")
        as_root(box, f"citizen proposal reject {second} --why 'not now'")
        assert decided(box, second)["decision"] == "reject"
        assert queue(box) == [third]
    finally:
        as_user(box, "mira", f"truncate -s 0 {HISTORY}; rm -f {SHARED}/proposals/pending/"
                "prop-x.json", check=False)
        as_root(box, f"citizen proposal reject {third} --why 'test over'", check=False)


def test_root_neither_reads_nor_writes_a_room_document_through_a_link(box: Container) -> None:
    secret = "/etc/experience/door-canary.json"  # noqa: S105 - a path, not a password
    body = json.dumps({"schema_version": 1, "temperature": 0.5,
                       "updated": "2026-01-01T00:00:00Z", "secret": CANARY})
    as_root(box, f"umask 077; echo '{body}' > {secret}; citizen room presence "
            "general --here")  # the rooms folder exists, as it does once anyone watched
    doc = f"{SHARED}/streams/rooms/lobby.json"
    try:
        as_user(box, "mira", f"ln -s {secret} {doc}")
        out = as_root(box, "citizen room presence lobby --here 2>&1; echo rc=$?",
                      check=False)
        assert "rc=0" not in out, out
        assert as_root(box, f"stat -c '%a %U' {secret}").split() == ["600", "root"]
        assert json.loads(as_root(box, f"cat {secret}"))["secret"] == CANARY
        assert as_root(box, f"test -L {doc} && echo link").strip() == "link"
        rooms = as_root(box, f"find {SHARED}/streams/rooms -type f -exec cat {{}} +",
                        check=False)
        assert CANARY not in rooms
        mode = as_root(box, f"stat -c '%a' {SHARED}/streams/rooms").strip()
        assert mode == "3775", mode
    finally:
        as_user(box, "mira", f"rm -f {doc}", check=False)
        as_root(box, f"rm -f {secret}", check=False)
