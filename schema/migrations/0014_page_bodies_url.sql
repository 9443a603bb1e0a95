-- Processors (issue 13): a kept body carries its page's URL and depth, so
-- reading a batch reads page_bodies alone. Joined to the frontier, each
-- page cost a walk over its frontier row's versions (three updates per
-- fetch, none HOT), the most CPU a batch read spent. Rows written before
-- this (or by a node not yet upgraded) have none, and are read through
-- the frontier as before.
ALTER TABLE page_bodies ADD COLUMN IF NOT EXISTS url text;
ALTER TABLE page_bodies ADD COLUMN IF NOT EXISTS depth int;
ALTER TABLE page_bodies ALTER COLUMN url SET STORAGE EXTERNAL;
ALTER TABLE page_bodies ALTER COLUMN url SET STATISTICS 0;
ALTER TABLE page_bodies ALTER COLUMN depth SET STATISTICS 0;
