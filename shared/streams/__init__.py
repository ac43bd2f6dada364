"""ThoughtStream coordination: who answers a message that reached several citizens.

`decision` is the pure decision (slots, claims, early exits), `temperature` the pure
arithmetic of a room's temperature, `rooms` the rooms and their shared document,
`governance` a room's settings, which only the operator (root, on a server) writes,
`floor` who may speak once decided (overrides, interruptions, the moderator's
silence), `semaphore` the shared model's admission control, `ratings` the post-hoc
ratings and calibration, and `store` the streams in the commons (`shared/streams/<id>/`).
"""

from shared.streams.decision import (
    CLEAR_WINNER,
    HIGH_PRESSURE,
    IDLE_SLOTS,
    PRESETS,
    PRESSED_MIN_CONFIDENCE,
    SLOT_WEIGHTS,
    UNCOORDINATED_WAIT_MS,
    Decision,
    DecisionRecord,
    Settings,
    Stream,
    Thought,
    ThoughtRecord,
    cap,
    decide,
    mentions,
    min_confidence,
    slots,
    stream_id,
)
from shared.streams.floor import GRANTED, INTERRUPTION, OVERRIDE, floor, moderated
from shared.streams.ratings import Ratings
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

__all__ = ["CLEAR_WINNER", "DECAY", "DECAY_EVERY_S", "FLOOR", "GRANTED", "HIGH_PRESSURE",
           "IDLE_SLOTS", "INTERRUPTION", "OVERRIDE", "PRESETS", "PRESSED_MIN_CONFIDENCE",
           "ROOM_DEFAULTS", "SLOT_WEIGHTS", "START", "UNCOORDINATED_WAIT_MS", "Decision",
           "DecisionRecord", "Ratings", "Semaphore", "Settings", "Stream", "Streams",
           "Thought", "ThoughtRecord", "cap", "cooled", "decide", "floor", "load_factor",
           "mentions", "min_confidence", "moderated", "slots", "stream_id",
           "temperature_bias", "warmed"]
