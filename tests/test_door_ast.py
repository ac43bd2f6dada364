"""The door holds: trusted code reaches what citizens can write only through
shared/door.py and shared/atomic.py (issue 42).

Two rules, read from the code's syntax tree:

1. **No mode or owner is set by name**, anywhere in `citizen/` and `shared/`: `os.chmod`,
   `os.chown`, `Path.chmod`, `shutil.chown` follow a link the citizen swapped in for the
   file (root made /etc/experience/opus.env the citizen's that way). Use `os.fchmod` /
   `os.fchown` on an open descriptor (shared/atomic.py does), or `follow_symlinks=False`.
2. **Trusted modules open, read and write no file by name** - root's CLI
   (`citizen/cli`), onboarding, status, backups and root's helper (`citizen/admin`),
   the broker (`citizen/broker`), the web user (`citizen/web`) and the scheduler
   (`citizen/daemon/scheduler.py`, `scheduled.py`): no `open()`, `Path.open`,
   `read_text`, `read_bytes`, `write_text`, `write_bytes`, `json.load`, `gzip.open`,
   and an `os.open` only with O_NOFOLLOW. Reads go through `shared.door` (a plain file,
   never a link or a FIFO, capped) or `shared.atomic.read_json`/`read_jsonl`; writes
   through `shared.atomic.write_bytes`/`write_json` (descriptors all the way).

A line that touches a path no citizen can write (root's /etc/experience, the broker's
own state, /proc, the release) says so in a `# door: <why>` comment (on the line, or
alone on the line above), and is let through:
the reason is read in review, the rest is held here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from citizen.config import paths

ROOT = paths.project_dir()
BY_NAME = {("os", "chmod"), ("os", "chown"), ("os", "lchown"), ("shutil", "chown")}
PATH_MODE = {"chmod", "chown", "lchmod"}
READS = {"read_text", "read_bytes", "write_text", "write_bytes"}
MODULE_READS = {("json", "load"), ("gzip", "open"), ("bz2", "open"), ("lzma", "open")}
TRUSTED = ("citizen/cli", "citizen/admin", "citizen/broker", "citizen/web",
           "citizen/daemon/scheduler.py", "citizen/daemon/scheduled.py")
DOOR = ("shared/door.py",)  # the door itself


def _files(*where: str) -> list[Path]:
    out: list[Path] = []
    for w in where:
        p = ROOT / w
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return [p for p in out if str(p.relative_to(ROOT)) not in DOOR]


def _exempt(lines: list[str], node: ast.AST) -> bool:
    """A `# door:` comment on the call's lines, or alone on the line above it."""
    first = int(getattr(node, "lineno", 1))
    last = int(getattr(node, "end_lineno", first) or first)
    above = lines[first - 2].strip() if first > 1 else ""
    return above.startswith("# door:") or any("# door:" in lines[n - 1]
                                               for n in range(first, last + 1))


def _call_name(call: ast.Call) -> tuple[str, str]:
    f = call.func
    if isinstance(f, ast.Name):
        return "", f.id
    if isinstance(f, ast.Attribute):
        base = f.value.id if isinstance(f.value, ast.Name) else "?"
        return base, f.attr
    return "?", "?"


def _mode_by_name(call: ast.Call) -> bool:
    base, name = _call_name(call)
    if (base, name) in BY_NAME or (base not in ("os", "shutil") and name in PATH_MODE
                                   and isinstance(call.func, ast.Attribute)):
        return not any(k.arg == "follow_symlinks" and isinstance(k.value, ast.Constant)
                       and k.value.value is False for k in call.keywords)
    return False


def _read_by_name(call: ast.Call) -> bool:
    base, name = _call_name(call)
    if base == "" and name == "open":
        return True
    if (base, name) in MODULE_READS:
        return True
    if base == "os" and name == "open":
        return "O_NOFOLLOW" not in ast.unparse(call) and "_FLAGS" not in ast.unparse(call)
    return isinstance(call.func, ast.Attribute) and base not in ("os", "door", "atomic") \
        and (name in READS or (name == "open" and base != "os"))


def _violations(files: list[Path], rule: object) -> list[str]:
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and rule(node) and not _exempt(lines, node):  # type: ignore[operator]
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_no_mode_or_owner_is_set_by_name() -> None:
    bad = _violations(_files("citizen", "shared"), _mode_by_name)
    assert bad == [], ("set modes and owners through a descriptor (os.fchmod/os.fchown, "
                       "as shared/atomic.py does), or say why the path is no citizen's in "
                       "a `# door:` comment:\n" + "\n".join(bad))


def test_trusted_modules_touch_files_only_through_the_door() -> None:
    bad = _violations(_files(*TRUSTED), _read_by_name)
    assert bad == [], ("read through shared.door (open_plain, read_capped, read_tail, "
                       "gunzip_capped) or shared.atomic (read_json, read_jsonl, "
                       "write_bytes), or say why the path is no citizen's in a `# door:` "
                       "comment:\n" + "\n".join(bad))


def test_the_rules_catch_what_they_forbid() -> None:
    """The checker itself can fail: each forbidden form is caught, each door form passes."""
    caught = ["os.chmod(tmp, 0o660)", "path.chmod(0o644)", "os.chown(tmp, 1, 2)",
              "shutil.chown(p, 'opus')"]
    passed = ["os.fchmod(fd, 0o660)", "os.chown(p, 1, 2, follow_symlinks=False)"]
    reads = ["open(p)", "path.read_text()", "p.read_bytes()", "json.load(fh)",
             "gzip.open(p)", "os.open(p, os.O_RDONLY)", "p.open('rb')", "p.write_text('x')"]
    ok_reads = ["door.read_capped(p, 10)", "os.open(p, os.O_RDONLY | os.O_NOFOLLOW)",
                "read_json(p)"]

    def call(src: str) -> ast.Call:
        node = ast.parse(src).body[0]
        assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
        return node.value

    assert [s for s in caught if not _mode_by_name(call(s))] == []
    assert [s for s in passed if _mode_by_name(call(s))] == []
    assert [s for s in reads if not _read_by_name(call(s))] == []
    assert [s for s in ok_reads if _read_by_name(call(s))] == []
