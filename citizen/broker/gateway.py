"""The commons' records as the broker itself reads and writes them (several servers).

A step the broker takes for a citizen - the merge into the baseline, the draw of a
change's reviewers, an approved proposal's actions in the world (`citizen.broker.repos`,
`citizen.broker.reviews`, `citizen.broker.world`) - reads the same records its citizens
read and files its own, in the civilization's database, through its own pool
(`Broker.database`): citizens never hold a login, the broker is the gateway. `Gateway`
is the citizen's `citizen.access.commons.BrokerCommons` with its one `call` answered in
process by the very routes the socket serves (`citizen.broker.commons`): the same keys,
documents, leases and refusals, and the author of what it files is `citizen` - the
caller the kernel named, who lives on this server, or the database refuses the row.
The merge and draw records go where no citizen's route may file (`BROKERS_ONLY`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from citizen.access.commons import PREFIX, BrokerCommons
from citizen.broker import commons
from citizen.broker.refused import Refused
from citizen.broker.server import ROUTES, Broker
from shared.remote import RemoteRefused, Taken

# The broker's own records: filed in the folders no citizen's route may file in.
_OWN = {"record/create": commons.file_once, "record/write": commons.file_own}


class Gateway(BrokerCommons):
    """`shared.remote.Remote` over this broker's database, as `citizen`."""

    def __init__(self, broker: Broker, citizen: str) -> None:
        super().__init__(Path("/nonexistent"), citizen)  # no socket: answered in process
        self.broker = broker

    def call(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        raw = json.dumps(body).encode()
        try:
            if route in _OWN:
                _, answer = _OWN[route](self.broker, self.citizen, raw, filed_by_broker=True)
            else:
                _, answer = ROUTES[("POST", PREFIX + route)](self.broker, self.citizen, raw)
        except Refused as exc:
            if exc.status == 409 and route == "record/create":
                raise Taken(409, str(exc)) from exc
            raise RemoteRefused(exc.status, str(exc)) from exc
        return dict(answer)
