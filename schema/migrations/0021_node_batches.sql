-- A pool of nodes pulls its work from Postgres (issue 30).
--
-- Until now every batch of URLs was a Temporal activity on its node's task
-- queue: a lease gives each node its hosts' share, so with N nodes a batch
-- held about 1/N of the work and the campaign's one workflow history paid
-- N times the events for the same pages (490 events per 1,000 pages on 48
-- nodes against 42 on 3). Now a lease writes each node's batches here and
-- the nodes take them; the workflow keeps membership, the ring, limits and
-- completion, and its history no longer grows with the pool.
--
-- Additive only: nodes of the previous release go on running the runs that
-- started under them (their batches are activities), and never see these
-- tables.

-- Batches routed to a node and not yet done: queued (taken_by NULL) until
-- the node takes them, then held until it reports them done. A node's
-- rows are its window: a lease routes to a node only as many batches as
-- its window has room for. No foreign keys: a hot table, like the
-- processors' (a campaign's rows go when it finishes).
CREATE TABLE IF NOT EXISTS node_batches (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign     bigint      NOT NULL,
    campaign_id  text        NOT NULL,
    lease_id     bigint      NOT NULL,
    node         text        NOT NULL,
    ids          bigint[]    NOT NULL,
    hand_back_ms int         NOT NULL DEFAULT 0,
    body_chunks  boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- The lease's expiry: a batch nobody took by then goes, and its URLs
    -- return to pending as the lease's do.
    expires_at   timestamptz NOT NULL,
    taken_by     text,   -- the holder (node@incarnation) that took it
    taken_at     timestamptz
);
CREATE INDEX IF NOT EXISTS node_batches_queued ON node_batches (node, id) WHERE taken_by IS NULL;
CREATE INDEX IF NOT EXISTS node_batches_by_campaign ON node_batches (campaign, node);

-- What each node did for each campaign, summed from its batches: the
-- workflow reads its counters and each node's figures from here.
CREATE TABLE IF NOT EXISTS campaign_nodes (
    campaign         bigint NOT NULL,
    node             text   NOT NULL,
    batches          bigint NOT NULL DEFAULT 0,  -- routed to it
    urls             bigint NOT NULL DEFAULT 0,  -- in those batches
    fetched          bigint NOT NULL DEFAULT 0,
    failed           bigint NOT NULL DEFAULT 0,
    retried          bigint NOT NULL DEFAULT 0,
    excluded         bigint NOT NULL DEFAULT 0,
    discovered       bigint NOT NULL DEFAULT 0,
    bytes            bigint NOT NULL DEFAULT 0,
    requests         bigint NOT NULL DEFAULT 0,
    request_ms       bigint NOT NULL DEFAULT 0,
    transport_errors bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign, node)
);

-- What a node can do ("pull": it takes batches from node_batches;
-- "batches": it runs FetchBatch activities on its task queue). Valid only
-- for the incarnation that declared them, so a node of an older release
-- restarted under the same ID declares nothing.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS capabilities text[] NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS capabilities_of text;
