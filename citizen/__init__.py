"""Experience: the daemon and tools a citizen runs."""

__version__ = "0.1.0"
