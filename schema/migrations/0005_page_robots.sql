-- What a page says of itself (issue 12): its robots directives, from
-- <meta name="robots"> and the X-Robots-Tag header, the canonical URL it
-- names, and the charset its title and links were read in. Defaults keep
-- the inserts of nodes not yet upgraded working; the columns are added
-- without rewriting the table.
ALTER TABLE pages
    ADD COLUMN IF NOT EXISTS noindex   boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS nofollow  boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS noarchive boolean NOT NULL DEFAULT false, -- kept out of WARC unless archive.ignore_noarchive
    ADD COLUMN IF NOT EXISTS canonical text,   -- <link rel=canonical> or Link: rel=canonical, resolved
    ADD COLUMN IF NOT EXISTS charset   text;   -- WHATWG encoding name, for HTML pages

-- frontier.found_as now holds the URL as linked (absolute, its query in the
-- link's own order) when that differs from the canonical url: it is what
-- is requested. Rows written before hold the raw href; a node requests
-- found_as only when it canonicalises to the row's url.
