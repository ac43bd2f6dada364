-- One civilization on several servers: what its servers share in one PostgreSQL database.
-- Applied by the operator's admin role (`citizen civilization install`), idempotent; the
-- tables belong to that role. Every server's broker logs in as a role of its own, a member
-- of experience_server, and may write only what this file grants - enforced here, by the
-- database, so one server's broker cannot author another server's citizens whatever its
-- code does. Citizens never hold a login: their broker is their gateway.

DO $$ BEGIN
    CREATE ROLE experience_server NOLOGIN;  -- every server's broker role is a member
EXCEPTION WHEN duplicate_object THEN NULL; END $$;

-- The servers and which server each citizen lives on. Only the admin adds a server or
-- moves a citizen (a restore on another server); a server claims a new citizen's name
-- for itself through claim_citizen, never one another server holds.
CREATE TABLE IF NOT EXISTS servers (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9-]{0,31}$'),
    role name NOT NULL UNIQUE,
    joined timestamptz NOT NULL DEFAULT now(),
    seen timestamptz  -- its broker's last word (status shows a silent server)
);
CREATE TABLE IF NOT EXISTS citizens (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,31}$'),
    server text NOT NULL REFERENCES servers (name)
);

-- The server the connected role is, and whether a citizen lives on it. Used by every
-- policy below: the database's word on authorship, not the broker's. Plain SQL run as
-- the caller (who may read both tables), so the planner inlines them into each policy:
-- as SECURITY DEFINER functions they cost ~0.5 ms a reservation (bench/spend.py).
-- session_user, not current_user: the login, whatever role a session sets.
CREATE OR REPLACE FUNCTION my_server() RETURNS text
    LANGUAGE sql STABLE SECURITY INVOKER AS
    $$ SELECT name FROM public.servers WHERE role = session_user $$;
CREATE OR REPLACE FUNCTION mine(who text) RETURNS boolean
    LANGUAGE sql STABLE SECURITY INVOKER AS
    $$ SELECT EXISTS (SELECT 1 FROM public.citizens c JOIN public.servers s
                      ON s.name = c.server WHERE c.name = who AND s.role = session_user) $$;

-- A new citizen on the calling server: its name claimed if free; the server holding it
-- returned either way (a name another server holds is that server's: the caller refuses).
CREATE OR REPLACE FUNCTION claim_citizen(who text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE here text := my_server();
BEGIN
    IF here IS NULL THEN
        RAISE EXCEPTION 'role % is no server of this civilization', session_user;
    END IF;
    INSERT INTO public.citizens (name, server) VALUES (who, here) ON CONFLICT DO NOTHING;
    RETURN (SELECT server FROM public.citizens WHERE name = who);
END $$;

-- A server's broker says it is alive (status: every server's citizens and when each
-- server was last heard from).
CREATE OR REPLACE FUNCTION server_seen() RETURNS void
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS
    $$ UPDATE public.servers SET seen = now() WHERE role = session_user $$;

-- Records: one row per record of the commons, keyed by its place ('changes/<id>/
-- reviews/opus.json') and its author: each author writes in a namespace of its own, so
-- no one can take a place before its author does (a peer's row at 'moves/0002-mira.json'
-- is the peer's, and mira's own is still hers to write - as a file pre-created in her
-- name is written beside on one server). Never edited but by its author, whom the
-- database checks lives on the writing server.
CREATE TABLE IF NOT EXISTS records (
    key text NOT NULL,
    author text NOT NULL REFERENCES citizens (name),
    folder text NOT NULL,
    data jsonb NOT NULL,
    written timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (key, author)
);
CREATE INDEX IF NOT EXISTS records_folder ON records (folder, key);
ALTER TABLE records ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS records_read ON records;
CREATE POLICY records_read ON records FOR SELECT USING (true);
DROP POLICY IF EXISTS records_add ON records;
CREATE POLICY records_add ON records FOR INSERT WITH CHECK (mine(author));
DROP POLICY IF EXISTS records_rewrite ON records;
CREATE POLICY records_rewrite ON records FOR UPDATE USING (mine(author)) WITH CHECK (mine(author));

-- Documents: a shared JSON document every citizen changes (a proposal's view, a room),
-- read FOR UPDATE and written in one transaction.
CREATE TABLE IF NOT EXISTS documents (
    key text PRIMARY KEY,
    data jsonb NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    written timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Leases: a lock a citizen holds across its read, check and write (a debate's next
-- move), through its broker's calls; a holder that dies frees it when `until` passes.
-- A coordination aid, not a trust boundary: what counts is still each record's author.
CREATE TABLE IF NOT EXISTS leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    token text NOT NULL,
    until timestamptz NOT NULL
);
ALTER TABLE leases ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS leases_read ON leases;
CREATE POLICY leases_read ON leases FOR SELECT USING (true);
DROP POLICY IF EXISTS leases_take ON leases;
CREATE POLICY leases_take ON leases FOR INSERT WITH CHECK (mine(holder));
DROP POLICY IF EXISTS leases_pass ON leases;
CREATE POLICY leases_pass ON leases FOR UPDATE USING (true) WITH CHECK (mine(holder));

-- The one ledger: what each citizen and the civilization ('*') have spent or reserved
-- per period (a day '2026-11-29' or a month '2026-11'), and every call. A reservation
-- checks and raises all four of a call's periods in one statement (citizen.broker.spend).
CREATE TABLE IF NOT EXISTS spend (
    citizen text NOT NULL,
    period text NOT NULL,
    used numeric NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (citizen, period)
);
ALTER TABLE spend ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS spend_read ON spend;
CREATE POLICY spend_read ON spend FOR SELECT USING (true);
DROP POLICY IF EXISTS spend_add ON spend;
CREATE POLICY spend_add ON spend FOR INSERT WITH CHECK (citizen = '*' OR mine(citizen));
DROP POLICY IF EXISTS spend_change ON spend;
CREATE POLICY spend_change ON spend FOR UPDATE USING (citizen = '*' OR mine(citizen))
    WITH CHECK (citizen = '*' OR mine(citizen));

CREATE TABLE IF NOT EXISTS calls (
    id bigserial PRIMARY KEY,
    server text NOT NULL DEFAULT my_server() REFERENCES servers (name),
    citizen text NOT NULL,
    day text NOT NULL,
    month text NOT NULL,
    ts text NOT NULL,
    model text NOT NULL,
    purpose text NOT NULL DEFAULT '',
    reserved_usd numeric NOT NULL,
    cost_usd numeric,
    state text NOT NULL,
    status integer,
    input_tokens integer, output_tokens integer, cache_write_tokens integer,
    cache_read_tokens integer
);
CREATE INDEX IF NOT EXISTS calls_day ON calls (day, citizen);
CREATE INDEX IF NOT EXISTS calls_open ON calls (server, state) WHERE state = 'reserved';
ALTER TABLE calls ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS calls_read ON calls;
CREATE POLICY calls_read ON calls FOR SELECT USING (true);
DROP POLICY IF EXISTS calls_add ON calls;
CREATE POLICY calls_add ON calls FOR INSERT WITH CHECK (mine(citizen) AND server = my_server());
DROP POLICY IF EXISTS calls_close ON calls;
CREATE POLICY calls_close ON calls FOR UPDATE USING (server = my_server())
    WITH CHECK (server = my_server());

-- What a server's broker may do at all: read everything, add and change only as above,
-- delete nothing (a record is never deleted; a change of state is a new record).
REVOKE ALL ON servers, citizens, records, documents, leases, spend, calls FROM PUBLIC;
GRANT SELECT ON servers, citizens TO experience_server;
GRANT SELECT, INSERT, UPDATE ON records, documents, leases, spend, calls TO experience_server;
GRANT USAGE ON SEQUENCE calls_id_seq TO experience_server;
REVOKE ALL ON FUNCTION claim_citizen(text), server_seen() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim_citizen(text), server_seen(), my_server(), mine(text)
    TO experience_server;
