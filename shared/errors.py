"""The root of every error raised by the commons."""


class SharedError(Exception):
    """Base class: anything that went wrong reading or writing the commons."""
