"""The server install on a real systemd, booted once for the whole package (conftest.py):
`test_1_install` (setup, units, users, sandbox, restarts, operator commands, a hostile
model) runs before `test_2_civilization` (evolution, onboarding, backup, upgrade,
consensus and streams across users, a restore on a fresh server), which builds on it."""
