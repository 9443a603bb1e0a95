-- Processors (issue 13): page_bodies is a queue, each row read once or
-- twice and deleted within seconds, so its rows are kept as cheaply as
-- Postgres can write them.
--
-- Bodies stay uncompressed, in the row while it fits a page: pglz
-- compressing every body cost more CPU than anything else done with it,
-- and the disk it saves is held for seconds. A body too large for a page
-- goes to TOAST, uncompressed.
ALTER TABLE page_bodies ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE page_bodies ALTER COLUMN headers SET STORAGE EXTERNAL;
ALTER TABLE page_bodies SET (toast_tuple_target = 8160);

-- The store analyzes page_bodies as it churns (store/stats.go), for its
-- row count: a sample of 300 rows tells it as well as the 30,000 the
-- default statistics target reads (an analyze took 460 ms of a 60,000-page
-- bench, 17 times).
ALTER TABLE page_bodies ALTER COLUMN url_id SET STATISTICS 1;
ALTER TABLE page_bodies ALTER COLUMN campaign SET STATISTICS 1;
ALTER TABLE page_bodies ALTER COLUMN status SET STATISTICS 1;
ALTER TABLE page_bodies ALTER COLUMN content_type SET STATISTICS 1;
ALTER TABLE page_bodies ALTER COLUMN fetched_at SET STATISTICS 1;
ALTER TABLE page_bodies ALTER COLUMN sha256 SET STATISTICS 1;
ALTER TABLE page_bodies ALTER COLUMN token SET STATISTICS 1;
