"""DRY violations: duplication and needless complexity, found and fixed by citizens.

`shared/dry/<id>.json` is a violation (owned by whoever found it);
`shared/dry/<id>.fixed/<citizen>.json` says who fixed it and how. Open or fixed is
derived from those files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared import records
from shared.errors import NotFound
from shared.layout import Layout


class DryTracker:
    def __init__(self, shared_dir: Path, enforce_identity: bool) -> None:
        self.dir = Layout(shared_dir).dry
        self.enforce = enforce_identity

    def report(self, citizen: str, location: str, description: str, fix: str) -> str:
        """File a violation; returns its id."""
        vid = records.new_id("dry")
        records.write(self.dir, self.dir / f"{vid}.json", citizen, {
            "id": vid, "location": location,
            "description": description, "fix": fix})
        return vid

    def fixed(self, citizen: str, vid: str, note: str) -> None:
        if not (self.dir / f"{vid}.json").exists():
            raise NotFound(f"no violation {vid} - see dry_violation_list")
        records.write(self.dir, self.dir / f"{vid}.fixed" / f"{citizen}.json", citizen,
                      {"note": note})

    def violations(self, status: str = "open") -> list[dict[str, Any]]:
        """Violations with their derived status: open, or fixed (by whom)."""
        out = []
        for path in sorted(self.dir.glob("dry-*.json")) if self.dir.is_dir() else ():
            data = records.read(path, None, self.enforce)
            if data is None:
                continue
            fixes = sorted(p.stem for p in (self.dir / f"{path.stem}.fixed").glob("*.json")
                           if records.read(p, p.stem, self.enforce, by_name=True) is not None)
            data["status"] = "fixed" if fixes else "open"
            data["fixed_by"] = fixes
            if status in ("all", data["status"]):
                out.append(data)
        return out

