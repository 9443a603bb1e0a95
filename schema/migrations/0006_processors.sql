-- Processors (issue 13): pages flow on to user activities, and what those
-- return is kept here.

-- One row per page a processor wants, written with the page record in the
-- commit that records the fetch; its state moves pending -> leased (a
-- batch of the campaign workflow holds it) -> done or failed.
CREATE TABLE IF NOT EXISTS deliveries (
    campaign   bigint      NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    processor  text        NOT NULL,
    url_id     bigint      NOT NULL REFERENCES frontier (id) ON DELETE CASCADE,
    state      text        NOT NULL DEFAULT 'pending', -- pending, leased, done, failed
    attempts   int         NOT NULL DEFAULT 0,         -- batches it went out in
    lease      bigint,                                 -- the batch holding it: a lease retried finds its rows
    error      text,
    items      int         NOT NULL DEFAULT 0,
    links      int         NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    done_at    timestamptz,
    PRIMARY KEY (campaign, url_id, processor)
);
-- Leasing takes the oldest pages waiting; counting what waits stays small.
CREATE INDEX IF NOT EXISTS deliveries_waiting ON deliveries (campaign, processor, url_id)
    WHERE state IN ('pending', 'leased');

-- A page's response as processors get it, kept until every delivery of the
-- page is done or failed. token names it in body references.
CREATE TABLE IF NOT EXISTS page_bodies (
    url_id       bigint      PRIMARY KEY REFERENCES frontier (id) ON DELETE CASCADE,
    campaign     bigint      NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    final_url    text        NOT NULL,
    status       int         NOT NULL,
    headers      jsonb       NOT NULL,
    content_type text,
    fetched_at   timestamptz NOT NULL,
    body         bytea       NOT NULL,
    sha256       text        NOT NULL,
    token        text        NOT NULL UNIQUE
);

-- What processors made of pages: stored once per (campaign, processor,
-- page), so a retried batch replaces its own items and never adds twice.
CREATE TABLE IF NOT EXISTS items (
    campaign  bigint NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    processor text   NOT NULL,
    url_id    bigint NOT NULL REFERENCES frontier (id) ON DELETE CASCADE,
    seq       int    NOT NULL,
    item      jsonb  NOT NULL,
    PRIMARY KEY (campaign, processor, url_id, seq)
);

-- Where a node serves page bodies too large to send inline (its HTTP
-- address), for processors to fetch.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS http_addr text;
