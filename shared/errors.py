"""The one error taxonomy of the commons.

Every error raised by `shared` is a `SharedError` and one of four kinds, each also the
matching built-in so callers may catch either (filelock's `Timeout(TimeoutError)`,
APScheduler's `ScheduleLookupError(LookupError)`):

- `NotFound`   - no such proposal, debate, stream, module, tool, change, violation …
- `NotAllowed` - not this citizen's step now, a forged record, a rule that refuses it
- `Invalid`    - malformed input or a corrupt file (kept for inspection)
- `LockTimeout` - a lock or a slot could not be had in time

The tool loop turns any `SharedError` into an observation for the model (a fault in
the model's use of the commons); anything else is a bug in our code.
"""


class SharedError(Exception):
    """Base class: anything that went wrong reading or writing the commons."""


class NotFound(SharedError, LookupError):
    """The thing named does not exist (its message says how to list what does)."""


class NotAllowed(SharedError, PermissionError):
    """A step that is not this citizen's to take now, or that a rule refuses."""


class Invalid(SharedError, ValueError):
    """Input that breaks the protocol's shape, or a file that cannot be used."""


class LockTimeout(SharedError, TimeoutError):
    """A lock or a semaphore slot was not free within the time allowed."""


__all__ = ["Invalid", "LockTimeout", "NotAllowed", "NotFound", "SharedError"]
