"""One module per page of the dashboard, each with a `routes` list; `citizen.web.app`
includes every module named in `PAGES`. To add a page: write `citizen/web/pages/<noun>.py`
with its routes (their facts in `citizen/web/facts/<noun>.py`, templates in
`citizen/web/templates/`), add it here and, for the menu, to `templates/base.html`. The guard
(`citizen.web.auth.Guard`) already requires the session for it and checks the CSRF value of
its POSTs."""

PAGES = (
    "citizen.web.pages.login",
    "citizen.web.pages.civilization",
    "citizen.web.pages.wakes",
    "citizen.web.pages.decisions",
    "citizen.web.pages.rooms",
    "citizen.web.pages.money",
)
