-- Processors (issue 13): a batch holds its pages itself (processors
-- version 4). Leasing deletes the pages' deliveries rows and keeps their
-- ids in the batch's row; storing the outcome deletes that row, keeps a
-- failed page's delivery as 'failed', and counts the done pages in
-- processed_batches. A page so costs a delivery insert and delete where
-- it cost an insert and two updates (none HOT: state is indexed), each a
-- new row version and index entries that leases, stores and body drops
-- then stepped over.
--
-- Batches leased the earlier way (ids NULL) still mark their rows leased.
ALTER TABLE delivery_batches ADD COLUMN IF NOT EXISTS ids bigint[];

-- Done pages of batches that held their pages, a row per batch stored
-- (done rows are no longer kept): appended, never updated, so batches
-- stored side by side never wait on one row.
CREATE TABLE IF NOT EXISTS processed_batches (
    campaign  bigint NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    processor text   NOT NULL,
    pages     int    NOT NULL,
    items     int    NOT NULL
);
CREATE INDEX IF NOT EXISTS processed_batches_campaign ON processed_batches (campaign, processor);
