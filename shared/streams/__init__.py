"""ThoughtStream coordination: who answers a message that reached several citizens.

`decision` is the pure decision (slots, claims, early exits), `rooms` the rooms'
governance and temperature, `semaphore` the shared model's admission control, and
`store` the streams in the commons (`shared/streams/<id>/`).
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
from shared.streams.rooms import (
    DECAY,
    DECAY_EVERY_S,
    FLOOR,
    ROOM_DEFAULTS,
    START,
    cooled,
    load_factor,
    temperature_bias,
    warmed,
)
from shared.streams.semaphore import Semaphore
from shared.streams.store import Streams

__all__ = ["CLEAR_WINNER", "DECAY", "DECAY_EVERY_S", "FLOOR", "HIGH_PRESSURE", "PRESETS",
           "ROOM_DEFAULTS", "SLOT_WEIGHTS", "START", "UNCOORDINATED_WAIT_MS", "Decision",
           "DecisionRecord", "Semaphore", "Settings", "Stream", "Streams", "Thought",
           "ThoughtRecord", "cooled", "decide", "load_factor", "mentions", "slots",
           "stream_id", "temperature_bias", "warmed"]
