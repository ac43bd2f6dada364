"""Dynamic tools: written by a citizen, tested and approved by peers, then callable.

`tools/impl/<name>.py` defines `run(**args) -> str`; `tools/tests/test_<name>.py` tests
it (it may `import <name>`); `tools/registry/<name>.json` is the manifest (owned by the
author) with the sha256 of both files. A reviewer runs the tests itself, in a
subprocess with a timeout, and files its review with the hashes it tested. A tool is
callable only while enough approvals with passing tests match the current files: an
unapproved, failing, or modified-after-approval tool is never callable.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from shared import records
from shared.atomic import write_bytes
from shared.errors import Invalid, NotAllowed, NotFound, SharedError
from shared.layout import Layout

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{2,40}$")
TEST_TIMEOUT_S = 120
CALL_TIMEOUT_S = 60
# Runs one tool call in a fresh interpreter: arguments in on stdin, result out on stdout.
# How a caller confines what runs a tool's code: (argv, the private directory it needs)
# -> the argv to run. The daemon passes its sandbox (citizen.tools.sandbox.wrap); the commons
# cannot import it (`shared` never imports `citizen`). Unconfined when none is given.
Wrap = Callable[[list[str], Path], list[str]]
RUNNER = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('dyntool', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "print(module.run(**json.load(sys.stdin)))\n"
)




def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _exact(path: Path, sha: str) -> bytes:
    """The bytes of `path` if they are the ones a manifest names: read without following
    a link (the author could point its file at the reader's secrets) and hashed before
    anything runs them.

    :raises NotAllowed: a link, not a plain file, or other bytes than reviewed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise NotAllowed(f"{path.name} cannot be read as a plain file ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise NotAllowed(f"{path.name} is not a plain file; it is not run")
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != sha:
        raise NotAllowed(f"{path.name} is not what its manifest names; it is not run")
    return data


def _whole(data: dict[str, Any], name: str) -> bool:
    """A manifest every reader may use: filed under its own name (a valid one), with the
    fields a listing and a call read, each of its type."""
    return (data.get("name") == name and bool(NAME_RE.match(name))
            and isinstance(data.get("description"), str)
            and isinstance(data.get("input_schema"), dict)
            and all(isinstance(data.get(k), str) for k in ("impl_sha", "tests_sha")))


class DynTools:
    def __init__(self, shared_dir: Path, approvals: int, enforce_identity: bool) -> None:
        self.dir = Layout(shared_dir).tools
        self.approvals = approvals
        self.enforce = enforce_identity

    def _paths(self, name: str) -> tuple[Path, Path, Path]:
        return (self.dir / "impl" / f"{name}.py", self.dir / "tests" / f"test_{name}.py",
                self.dir / "registry" / f"{name}.json")

    def propose(self, citizen: str, name: str, *, description: str,
                input_schema: dict[str, Any], code: str, tests: str,
                reserved: set[str]) -> dict[str, Any]:
        if not NAME_RE.match(name) or name in reserved:
            raise Invalid(f"'{name}' is not a free tool name (3-41 lowercase letters, "
                               "digits, '_'; not a core tool)")
        impl, test, manifest = self._paths(name)
        existing = records.read(manifest, None, self.enforce)
        if existing and existing[records.AUTHOR] != citizen:
            raise NotAllowed(f"{name} belongs to {existing[records.AUTHOR]}")
        for path, text in ((impl, code), (test, tests)):
            records.make_dirs(path.parent, self.dir)
            write_bytes(path, text.encode(), mode=records.RECORD_MODE)
        return records.write(self.dir, manifest, citizen, {
            "name": name, "description": description, "input_schema": input_schema,
            "impl_sha": _sha(impl), "tests_sha": _sha(test)})

    def manifest(self, name: str) -> dict[str, Any]:
        _, _, manifest = self._paths(name)
        # Why: a citizen writes its manifest itself - a malformed one, or one claiming
        # another file's name, must be no tool rather than a KeyError in every wake.
        data = records.read(manifest, None, self.enforce, accept=lambda d: _whole(d, name))
        if data is None:
            raise NotFound(f"no tool {name} - see tool_list")
        return data

    def run_tests(self, name: str, wrap: Wrap | None = None) -> tuple[bool, str]:
        """Run the tool's tests on a private copy, in a subprocess with a timeout (inside
        `wrap`: the author's code runs with the reviewer's rights otherwise)."""
        impl, test, _ = self._paths(name)
        data = self.manifest(name)
        try:
            code, tests = _exact(impl, data["impl_sha"]), _exact(test, data["tests_sha"])
        except NotAllowed as exc:
            return False, f"not run: {exc}"
        with tempfile.TemporaryDirectory(prefix=f"tooltest-{name}-") as tmp:
            (Path(tmp) / f"{name}.py").write_bytes(code)
            (Path(tmp) / f"test_{name}.py").write_bytes(tests)
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"test_{name}.py"]
            try:
                result = subprocess.run(
                    wrap(argv, Path(tmp)) if wrap else argv, cwd=tmp, capture_output=True,
                    text=True,
                    timeout=TEST_TIMEOUT_S, check=False, env={"PATH": "/usr/bin:/bin",
                                                              "PYTHONPATH": tmp})
            except subprocess.TimeoutExpired:
                return False, f"tests ran past {TEST_TIMEOUT_S} s"
        return result.returncode == 0, (result.stdout + result.stderr)[-1500:]

    def review(self, citizen: str, name: str, decision: str, note: str,
               wrap: Wrap | None = None) -> dict[str, Any]:
        """File `citizen`'s review. An approval runs the tests first (in `wrap`); a
        rejection runs nothing of the author's - there is nothing to gain from it."""
        data = self.manifest(name)
        if data["author"] == citizen:
            raise NotAllowed("nobody reviews their own tool")
        passed, output = self.run_tests(name, wrap) if decision == "approve" else \
            (False, "not run: the reviewer rejected the tool")
        review = {"decision": decision, "note": note, "impl_sha": data["impl_sha"],
                  "tests_sha": data["tests_sha"], "tests_passed": passed, "output": output}
        records.write(self.dir, self.dir / "registry" / f"{name}.reviews" / f"{citizen}.json",
                      citizen, review)
        return {**review, "callable": self.callable(name)}

    def callable(self, name: str) -> bool:
        """Approved by enough peers whose passing tests ran on exactly the current files."""
        try:
            data = self.manifest(name)
        except SharedError:
            return False
        impl, test, _ = self._paths(name)
        if not impl.exists() or not test.exists():
            return False
        current = (_sha(impl), _sha(test))
        if current != (data["impl_sha"], data["tests_sha"]):
            return False  # the files changed after the manifest: never callable
        approvals = 0
        for path in (self.dir / "registry" / f"{name}.reviews").glob("*.json"):
            review = records.read(path, path.stem, self.enforce, by_name=True)
            # Why .get: a review is its author's own file; a bare one is no approval, no crash.
            if (review and path.stem != data["author"] and review.get("decision") == "approve"
                    and review.get("tests_passed") is True
                    and (review.get("impl_sha"), review.get("tests_sha")) == current):
                approvals += 1
        return approvals >= self.approvals

    def listing(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted((self.dir / "registry").glob("*.json")):
            data = records.read(path, None, self.enforce, accept=partial(_whole, name=path.stem))
            if data:
                out.append({k: data[k] for k in ("name", "description", "author")}
                           | {"callable": self.callable(data["name"])})
        return out

    def awaiting(self, citizen: str) -> list[dict[str, Any]]:
        """Peers' tools not yet callable that `citizen` has not reviewed as they are now
        (a review of older files no longer counts: the tool changed under it)."""
        out = []
        for path in sorted((self.dir / "registry").glob("*.json")):
            data = records.read(path, None, self.enforce, accept=partial(_whole, name=path.stem))
            if not data or data["author"] == citizen or self.callable(path.stem):
                continue
            mine = records.read(self.dir / "registry" / f"{path.stem}.reviews"
                                / f"{citizen}.json", citizen, self.enforce, by_name=True)
            if mine is None or (mine.get("impl_sha"), mine.get("tests_sha")) != (
                    data["impl_sha"], data["tests_sha"]):
                out.append({k: data[k] for k in ("name", "description", "author")})
        return out

    def call(self, name: str, args: dict[str, Any], cwd: Path, env: dict[str, str],
             wrap: Wrap | None = None) -> str:
        """Run an approved tool in a fresh interpreter with a timeout (inside `wrap`)."""
        if not self.callable(name):
            raise NotAllowed(f"{name} is not callable (not approved, failing, or changed "
                               "since its approval)")
        impl, _, _ = self._paths(name)
        # Run exactly the reviewed bytes: read once, checked against the approved hash, and
        # executed from a private copy - the file in the commons could be swapped between
        # the check above and the interpreter opening it.
        code = _exact(impl, self.manifest(name)["impl_sha"])
        with tempfile.TemporaryDirectory(prefix="dyntool-") as private:  # 0700: ours alone
            copy = Path(private) / f"{name}.py"
            copy.write_bytes(code)
            argv = [sys.executable, "-c", RUNNER, str(copy)]
            try:
                result = subprocess.run(wrap(argv, Path(private)) if wrap else argv,
                                        input=json.dumps(args), capture_output=True, text=True,
                                        cwd=cwd, env=env, timeout=CALL_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired as exc:
                raise Invalid(f"{name} ran past {CALL_TIMEOUT_S} s") from exc
        if result.returncode != 0:
            raise Invalid(f"{name} failed: {result.stderr.strip()[-500:]}")
        return result.stdout.strip()
