-- Processors (issue 13): pending and leased deliveries get an index each.
-- deliveries_waiting held both: a lease read past every leased row (up to
-- window x batch_size, the oldest, so first in url_id order) to find the
-- pending ones, and past every pending and leased row to find its own
-- batch when retried. Each now reads only what it takes.
CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries (campaign, processor, url_id)
    WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS deliveries_leased ON deliveries (campaign, processor, lease)
    WHERE state = 'leased';
DROP INDEX IF EXISTS deliveries_waiting;

-- page_bodies is analyzed as it churns (see store/stats.go): statistics of
-- the bodies and headers, which no query filters on, only made each
-- analyze slow.
ALTER TABLE page_bodies ALTER COLUMN body SET STATISTICS 0;
ALTER TABLE page_bodies ALTER COLUMN headers SET STATISTICS 0;
ALTER TABLE page_bodies ALTER COLUMN final_url SET STATISTICS 0;
