-- add_urls (issue 31, item 13): the update that stored a URL. An AddURLs
-- activity that runs again after its insert committed (its answer lost,
-- its worker gone) finds the rows its own request stored and counts them
-- new, as the first attempt did; without this it counted them known, and
-- the campaign's Added count and the operator's answer fell short.
--
-- Nullable, set only by add_urls: adding it rewrites nothing, and a node
-- of the previous release, which never sets it, inserts as before.
ALTER TABLE frontier ADD COLUMN IF NOT EXISTS added_by text;
