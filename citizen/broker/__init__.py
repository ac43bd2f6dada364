"""The broker: the one process that holds what the operator relies on (docs/architecture.md §4).

A citizen's whole Unix user is untrusted - its daemon runs code the citizen may rewrite -
so the model keys, the prices, the caps and the ledger live in `experience-broker`, a
service under its own system user, listening on a Unix socket. It knows each caller by
the kernel's peer credentials (`SO_PEERCRED`), never by anything the caller sends.

- `ledger`: the money (SQLite in WAL mode, written by the broker alone): a call's worst
  case is reserved before it is forwarded and settled from the response.
- `rules`: the operator's rules for one caller (caps, prices, models, endpoint, key),
  read only from the broker's own templates and the operator's directory.
- `estimate`: a request's worst-case cost and a response's real usage (streamed or not).
- `server`: the socket, the caller's identity, and the Messages API forwarding.
- `views`: the dashboard's read-only views of the broker's state, for root and the web
  user only (by the kernel), never a citizen.
- the citizen's side is `citizen.access` (where the socket is, an HTTP transport over it,
  and in dev mode a broker started as a child of `citizen`).

The broker is the top of the layers below the CLI: it may import everything a citizen's
code has (config, llm prices, mail parsing, the sandbox, the commons door), and nothing of
a citizen's process imports it - citizens reach it only through its socket.

Dev mode has the same shape: the broker runs as the developer, its socket and ledger
under the civilization root (`CIV_ROOT/.broker/`).
"""
