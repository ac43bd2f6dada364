"""The citizen's long-running process: `process.Daemon` (APScheduler slots, the
doorbell, a wake run as a child process), `status` (its state, process title and
heartbeat file) and `notify` (systemd's sd_notify and watchdog, shared with the broker).

May import everything below it (admin, wake, home, mail, config); the CLI and the broker
are above it.
"""
