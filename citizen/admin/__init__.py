"""What an operator does to a civilization, beside its daemons: found it (`founding`),
onboard a citizen on a server (`onboard`, `network`), back it up (`backup`), keep each
home within its disk budget (`disk`), and read every citizen's status (`status`).

May import wake, home, the commons door, access and config; never the daemon, the
broker or the CLI.
"""
