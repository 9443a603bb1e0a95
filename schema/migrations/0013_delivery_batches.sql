-- Processors (issue 13): a batch sent by reference (processor "batch":
-- "reference") is named by a random token; a node serving GET
-- /v1/batches/<token> finds here which campaign, processor and lease it
-- is. The row goes when the batch's outcome is stored, or when a later
-- run returns the lease's pages to pending.
CREATE TABLE IF NOT EXISTS delivery_batches (
    token       text        PRIMARY KEY,
    campaign    bigint      NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    campaign_id text        NOT NULL,
    processor   text        NOT NULL,
    lease       bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (campaign, processor, lease)
);
