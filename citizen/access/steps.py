"""The citizen's side of the broker's repository steps (citizen.broker.repos).

The baseline and the world repositories belong to the broker's user (issue 28, break 4):
no citizen writes them, so a merge at 2/3 adoption and an approved proposal's execution
or revert are requests to the broker, which re-derives from the commons' records - whose
authorship the file system proves - whether the step is owed, and takes it itself.
"""

from __future__ import annotations

from typing import Any

from citizen.access import client
from citizen.errors import CitizenError
from shared.errors import NotAllowed


def ask(citizen: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
    """One repository step of the broker's, for `citizen` (the kernel says who on a server).

    :raises NotAllowed: the broker refused or did not answer (its message says why).
    """
    try:
        status, answer = client.request(citizen, "POST", path, payload, timeout_s=900)
    except CitizenError as exc:  # no broker: nothing changed
        raise NotAllowed(str(exc)) from exc
    if status != 200:
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise NotAllowed(f"the broker refused ({status}): {message or answer}")
    return dict(answer)


def merge(citizen: str, change_id: str) -> None:
    """Ask the broker to merge a change `citizen`'s adoption brought to 2/3."""
    ask(citizen, "/v1/experience/baseline/merge", {"change_id": change_id})


def draw(citizen: str, change_id: str) -> None:
    """Ask the broker to draw the reviewers of a change `citizen` just announced."""
    ask(citizen, "/v1/experience/changes/draw", {"change_id": change_id})


def world(citizen: str, step: str, proposal: str) -> dict[str, Any]:
    """Ask the broker to `execute` an approved proposal or `revert` its execution."""
    return ask(citizen, f"/v1/experience/world/{step}", {"proposal": proposal})
