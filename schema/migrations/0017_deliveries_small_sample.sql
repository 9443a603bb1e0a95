-- Processors (issue 13): the store vacuums and analyzes deliveries as it
-- churns (store/stats.go), for its row count and the share of waiting
-- rows. A sample of 300 rows tells those as well as the 30,000 that the
-- default statistics target reads: measured on 20,000 waiting rows, an
-- analyze took 13-24 ms, and 1.1-1.2 ms with the small sample. As for
-- page_bodies (0012).
ALTER TABLE deliveries ALTER COLUMN campaign SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN processor SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN url_id SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN state SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN attempts SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN lease SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN error SET STATISTICS 0;
ALTER TABLE deliveries ALTER COLUMN items SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN links SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN created_at SET STATISTICS 1;
ALTER TABLE deliveries ALTER COLUMN done_at SET STATISTICS 1;
