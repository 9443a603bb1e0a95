-- The frontier, pages, node registry and ring history of spiderpool.
--
-- Invariant: every fingerprint inserted for a campaign ends fetched, failed
-- (last_error says why), excluded (last_error says why) or still pending; a
-- leased row past lease_expires_at goes back to pending at the next lease.

CREATE TYPE url_state AS ENUM ('pending', 'leased', 'fetched', 'failed', 'excluded');

CREATE TABLE campaigns (
    key         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          text        NOT NULL UNIQUE,  -- the workflow ID
    spec        jsonb       NOT NULL,         -- normalised spec
    status      text        NOT NULL DEFAULT 'running',
    admitted    bigint      NOT NULL DEFAULT 0, -- URLs ever leased, against limits.max_pages
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    summary     jsonb
);

-- One row per shard key (host by default): the unit of routing and of
-- politeness, whose state must survive nodes, remaps and restarts.
CREATE TABLE hosts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign        bigint      NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    shard_key       text        NOT NULL,
    -- No request may start before this, on any node; leasing skips the
    -- host until then (politeness delay, Retry-After, robots.txt outage).
    next_allowed_at timestamptz NOT NULL DEFAULT '-infinity',
    last_leased_at  timestamptz,
    -- The one node fetching from the host now: concurrency and delay hold
    -- across the cluster because only the claim holder fetches.
    claim_node      text,
    claim_until     timestamptz,
    -- Extra delay learned from repeated 5xx answers.
    extra_delay_ms  int         NOT NULL DEFAULT 0,
    UNIQUE (campaign, shard_key)
);

-- robots.txt per origin, as fetched: judged with RFC 9309's status rules.
CREATE TABLE robots (
    campaign   bigint      NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    origin     text        NOT NULL,  -- scheme://host[:port]
    status     int         NOT NULL,  -- 0: no answer
    body       bytea       NOT NULL,
    fetched_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (campaign, origin)
);

CREATE TABLE frontier (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign         bigint      NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    fingerprint      bigint      NOT NULL,  -- xxhash64 of url, as signed
    url              text        NOT NULL,  -- canonical form: what is fetched
    found_as         text,                  -- as written where found, when different
    host_id          bigint      NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    shard_key        text        NOT NULL,  -- computed once at discovery
    depth            int         NOT NULL,
    redirects        smallint    NOT NULL DEFAULT 0, -- hops of the redirect chain that led here
    parent_id        bigint,                -- the page that linked here
    state            url_state   NOT NULL DEFAULT 'pending',
    attempts         int         NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    first_leased_at  timestamptz,
    leased_at        timestamptz,
    lease_id         bigint,                -- the lease that holds it, or that last held it
    lease_holder     text,                  -- node/attempt/route of the batch that claimed it
    lease_expires_at timestamptz,
    node             text,                  -- node that holds or last held it
    last_status      int,
    last_error       text,
    discovered_at    timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    UNIQUE (campaign, fingerprint)
);

-- Leasing walks hosts and takes each one's shallowest due URLs.
CREATE INDEX frontier_pending ON frontier (campaign, host_id, depth, id) WHERE state = 'pending';
CREATE INDEX frontier_lease ON frontier (lease_id) WHERE state = 'leased';
CREATE INDEX frontier_lease_expiry ON frontier (campaign, lease_expires_at) WHERE state = 'leased';

CREATE SEQUENCE lease_ids;

-- Batches holding claimed URLs, alive while they renew. A rerouted batch
-- can claim a URL only from a holder that stopped renewing: a holder cut
-- off from Temporal but alive keeps fetching and committing its URLs, and
-- nobody fetches them a second time.
CREATE UNLOGGED TABLE holders (
    holder      text        PRIMARY KEY,
    alive_until timestamptz NOT NULL
);

-- One row per fetched URL: its final response.
CREATE TABLE pages (
    url_id         bigint      PRIMARY KEY REFERENCES frontier (id) ON DELETE CASCADE,
    campaign       bigint      NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    status         int         NOT NULL,
    content_type   text,
    content_length bigint      NOT NULL,  -- bytes read, after decompression
    truncated      boolean     NOT NULL DEFAULT false,
    content_digest text,                  -- sha256:<hex> of the bytes read
    title          text,
    redirect_to    text,
    links          int         NOT NULL DEFAULT 0,
    fetched_at     timestamptz NOT NULL,
    duration_ms    int         NOT NULL,
    node           text        NOT NULL
);
CREATE INDEX pages_by_node ON pages (campaign, node);

-- The node registry: a node whose heartbeat_at is older than ttl is dead.
CREATE TABLE nodes (
    id           text             PRIMARY KEY,
    weight       double precision NOT NULL,
    queue        text             NOT NULL,
    version      text             NOT NULL DEFAULT '',
    incarnation  text             NOT NULL,
    ttl          interval         NOT NULL,
    started_at   timestamptz      NOT NULL DEFAULT now(),
    heartbeat_at timestamptz      NOT NULL DEFAULT now(),
    stopped_at   timestamptz
);

-- Every change of a campaign's ring: operator signals and membership alike.
CREATE TABLE node_weight_history (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign   bigint           NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    node       text             NOT NULL,
    old_weight double precision NOT NULL,
    new_weight double precision NOT NULL,
    old_state  text             NOT NULL,
    new_state  text             NOT NULL,
    reason     text             NOT NULL,
    run        int              NOT NULL,
    -- batches of leases after this one were routed with the change in effect
    after_lease bigint          NOT NULL DEFAULT 0,
    changed_at timestamptz      NOT NULL DEFAULT now()
);
CREATE INDEX node_weight_history_by_campaign ON node_weight_history (campaign, changed_at);
