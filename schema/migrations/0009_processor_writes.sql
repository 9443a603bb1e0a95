-- Processors (issue 13): the rows kept per page for processors no longer
-- name their frontier row by a foreign key. Frontier rows are deleted only
-- with their campaign, which the campaign keys still cascade; and the
-- checks cost more than they guard: each insert locked its frontier row
-- (FOR KEY SHARE), so the fetch commits that update those rows next had to
-- step over multixact locks, and the frontier's updates took 2-4 times as
-- long while a processor ran.
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_url_id_fkey;
ALTER TABLE page_bodies DROP CONSTRAINT IF EXISTS page_bodies_url_id_fkey;
ALTER TABLE items DROP CONSTRAINT IF EXISTS items_url_id_fkey;
