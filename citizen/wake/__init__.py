"""One wake, from the gate to the log: the flow (`flow.run_wake`), the tool-calling loop
(`loop`), the meter every model call passes (`meter`), routing and tool selection
(`selection`), the prompt's blocks (`prompt`), the second opinion on "done"
(`verifier`), and the kinds of wake (`types/`, one module a kind, registered by name).

A new wake type goes in `types/`: a `WakeType` subclass with a gate and a setup, added
to `types/__init__.py`'s registry. May import: tools, mail, llm, home, the commons door
(`citizen.civilization`), access, config, errors; never the daemon, admin, broker or CLI.
"""
