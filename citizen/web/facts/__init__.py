"""What each page of the dashboard shows, computed from the stores on every call: plain
functions returning dicts and lists (no cache, no HTTP), tested directly. The same facts the
CLI prints, from the same functions (`citizen.admin.status`, `citizen.home.transcript`)."""
