"""Whether a person watches a ThoughtStream room (seed §8.5): one path for
`citizen stream room presence` and the dashboard's room page.

A person arriving warms the room (+0.2) and sets its `present` flag, which every bid
in the room sees (`user_present`); leaving cools it (−0.4). The room's document is the
commons' (`shared.streams.rooms`): the CLI writes it as root, and the web service -
which writes nothing on disk - asks root's helper (`citizen.admin.helper`).
"""

from __future__ import annotations

from citizen import civilization


def mark(room: str, present: bool) -> float:
    """Record that a person is watching `room` (or left it); its temperature now.

    :raises Invalid: not a room name (nothing is written).
    """
    return civilization.streams().heat(room, "present" if present else "absent")
