"""One civilization on several servers (issue 46), booted: two servers under systemd-nspawn
on a private network with one PostgreSQL between them (tests/lab.py), once per module."""
