"""ThoughtStream coordination: who answers a message that reached several citizens.

`decision` is the pure decision (slots, claims, early exits), `temperature` the pure
arithmetic of a room's temperature, `rooms` the rooms' governance and their document,
`semaphore` the shared model's admission control, and `store` the streams in the
commons (`shared/streams/<id>/`).
"""

from shared.streams.decision import (
    CLEAR_WINNER,
    HIGH_PRESSURE,
    PRESETS,
    SLOT_WEIGHTS,
    UNCOORDINATED_WAIT_MS,
    Decision,
    DecisionRecord,
    Settings,
    Stream,
    Thought,
    ThoughtRecord,
    decide,
    mentions,
    slots,
    stream_id,
)
from shared.streams.rooms import ROOM_DEFAULTS
from shared.streams.semaphore import Semaphore
from shared.streams.store import Streams
from shared.streams.temperature import (
    DECAY,
    DECAY_EVERY_S,
    FLOOR,
    START,
    cooled,
    load_factor,
    temperature_bias,
    warmed,
)

__all__ = ["CLEAR_WINNER", "DECAY", "DECAY_EVERY_S", "FLOOR", "HIGH_PRESSURE", "PRESETS",
           "ROOM_DEFAULTS", "SLOT_WEIGHTS", "START", "UNCOORDINATED_WAIT_MS", "Decision",
           "DecisionRecord", "Semaphore", "Settings", "Stream", "Streams", "Thought",
           "ThoughtRecord", "cooled", "decide", "load_factor", "mentions", "slots",
           "stream_id", "temperature_bias", "warmed"]
