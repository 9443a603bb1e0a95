-- Host-aware flow control: politeness belongs to the host, not the campaign.
--
-- Additive only: nodes of the previous release keep working against this
-- schema (their per-campaign columns in hosts and their robots table stay).

-- One row per shard key (host by default) for the whole cluster: every
-- campaign that crawls the host shares its claim, its pace and its pauses.
CREATE TABLE host_state (
    shard_key       text        PRIMARY KEY,
    -- No request may start before this, on any node (the pace, written by
    -- the claim holder before a long delay and when it lets go).
    next_allowed_at timestamptz NOT NULL DEFAULT '-infinity',
    -- A pause (Retry-After, robots.txt that cannot be had): leasing skips
    -- the host until then.
    paused_until    timestamptz NOT NULL DEFAULT '-infinity',
    -- The one holder (node@incarnation) fetching from the host now.
    claim_holder    text,
    claim_until     timestamptz,
    -- Another holder asked for the claim while it was held: the holder lets
    -- go after its fair share.
    wanted_until    timestamptz,
    extra_delay_ms  int         NOT NULL DEFAULT 0,  -- learned from 5xx answers
    interval_ms     int         NOT NULL DEFAULT 0,  -- least time between starts, as last applied
    latency_ms      int         NOT NULL DEFAULT 0   -- moving average of response time
);
CREATE INDEX host_state_by_holder ON host_state (claim_holder) WHERE claim_holder IS NOT NULL;

-- Each campaign's politeness, so a host's effective policy is the
-- strictest among the running campaigns that crawl it.
ALTER TABLE campaigns ADD COLUMN min_delay_ms     int NOT NULL DEFAULT 0;
ALTER TABLE campaigns ADD COLUMN host_concurrency int NOT NULL DEFAULT 0; -- 0: unknown (older rows)
CREATE INDEX hosts_by_shard_key ON hosts (shard_key);

-- robots.txt per origin, fetched once for the cluster; each campaign judges
-- its age by its own politeness.robots_ttl.
CREATE TABLE robots_cache (
    origin     text        PRIMARY KEY,  -- scheme://host[:port]
    status     int         NOT NULL,     -- 0: no answer
    body       bytea       NOT NULL,
    fetched_at timestamptz NOT NULL DEFAULT now()
);

-- Leasing counts each host's URLs in flight (leased, not yet settled).
CREATE INDEX frontier_inflight ON frontier (campaign, host_id) WHERE state = 'leased';
