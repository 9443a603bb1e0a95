-- Processors (issue 13): from processors version 8 a commit keeps the
-- bodies of its pages in one row, and each processor's deliveries of them
-- in one row, not a row per page in page_bodies and deliveries. A page
-- cost a row in each table, written, leased, read and deleted within
-- seconds, and vacuumed after: with a no-op processor, those rows were
-- most of the Postgres time the processor added to a crawl (about 15 s
-- of statements per 100,000 pages). Measured on a throwaway server,
-- 100,000 pages of 1.2 KB in commits of 64: 2.2 s of Postgres CPU to
-- write them a row each, 0.9 s a chunk each; 3.6 s to lease, read and
-- delete them a row each, 0.2-0.3 s a chunk each.
--
-- page_bodies and deliveries stay: rows written by a node not yet
-- upgraded (or for a run before version 8) are delivered as before, and
-- a failed page's delivery is still a deliveries row.

-- A commit's kept pages: store.encodeChunk's bytes, each page's metadata
-- and body. secret is in every body token of the chunk.
CREATE TABLE IF NOT EXISTS body_chunks (
    id       bigserial PRIMARY KEY,
    campaign bigint    NOT NULL,
    secret   text      NOT NULL,
    pages    bytea     NOT NULL
);

-- The pages of a chunk that a processor has still to take, in id order.
-- A lease takes rows whole, or the head of one; what a batch took is in
-- its delivery_batches row (chunks beside ids).
CREATE TABLE IF NOT EXISTS chunk_deliveries (
    campaign  bigint   NOT NULL,
    processor text     NOT NULL,
    chunk     bigint   NOT NULL,
    ids       bigint[] NOT NULL,
    PRIMARY KEY (campaign, processor, chunk)
);
-- A chunk goes once no processor has pages of it still to take.
CREATE INDEX IF NOT EXISTS chunk_deliveries_chunk ON chunk_deliveries (chunk);

-- The chunk of each page in ids, for a batch of chunked pages; NULL for
-- a batch of pages kept in page_bodies.
ALTER TABLE delivery_batches ADD COLUMN IF NOT EXISTS chunks bigint[];

DO $$
BEGIN
    ALTER TABLE body_chunks ALTER COLUMN pages SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'body_chunks: this server has no lz4, so chunks are compressed with pglz';
END
$$;
