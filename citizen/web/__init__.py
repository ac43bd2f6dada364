"""The operator's web dashboard (`citizen web`): a top layer beside the CLI.

`facts/` - plain functions computing what a page shows from the stores on every call (no
cache, no HTTP); `pages/` - one module per page with its routes; `app.py` builds the
Starlette app; `auth.py` the token, session, CSRF, headers and redaction. May import every
package of `citizen` below the CLI and `shared`; only `citizen.cli.web` imports it, and it
never imports the CLI.
"""
