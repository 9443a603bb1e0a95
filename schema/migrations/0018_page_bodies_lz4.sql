-- Processors (issue 13): a body over about 2 KB is kept compressed with
-- lz4, in its row while it fits there. 0012 kept bodies uncompressed
-- because pglz cost more CPU than anything else done with them; lz4 costs
-- less than writing the bytes it saves. Measured with COPY, chunks of 170,
-- on real HTML pages (rustdoc):
--   3,000 pages of 8-300 KB (120 MB): 1.1-1.2 s of Postgres CPU, 125 MB
--     of WAL and 127 MB of table uncompressed; 0.7-0.85 s, 39 MB and
--     39 MB with lz4 (pglz: 1.9 s);
--   12,000 pages of 2-8 KB (51 MB): 0.84-0.90 s, 58 MB of WAL and 93 MB
--     of table (a row of 4 KB or more had a page of its own); 0.46 s,
--     40 MB and 39 MB with lz4 and the default toast_tuple_target.
-- Reading them back cost the same. A body that does not compress (an
-- image, a PDF) of 2-8 KB now goes to TOAST: 5-10% more CPU to write.
-- Rows under 2 KB are never compressed (Postgres's threshold), so the
-- small pages of the synthetic web are kept as before.
--
-- Values written before stay as they are; Postgres reads both, so a node
-- not yet upgraded reads every body as before. A server built without
-- lz4 keeps bodies as 0012 left them.
DO $$
BEGIN
    ALTER TABLE page_bodies ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE page_bodies ALTER COLUMN body SET STORAGE EXTENDED;
    ALTER TABLE page_bodies RESET (toast_tuple_target);
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'page_bodies: this server has no lz4, so bodies stay uncompressed';
END
$$;
