-- Archive-grade WARC (issue 14).

-- The payloads a campaign has archived, one row per payload digest: the
-- record holding it. A node archiving a response claims its digest here
-- (INSERT ... ON CONFLICT DO NOTHING): the claim that wins writes the
-- payload in full, every later one writes a revisit record pointing at it,
-- whichever node it runs on.
CREATE TABLE IF NOT EXISTS archived_payloads (
    campaign   bigint NOT NULL REFERENCES campaigns (key) ON DELETE CASCADE,
    digest     text   NOT NULL, -- WARC-Payload-Digest, e.g. sha1:BASE32
    record_id  text   NOT NULL, -- WARC-Record-ID of the record holding it
    target_uri text   NOT NULL, -- its WARC-Target-URI
    warc_date  text   NOT NULL, -- its WARC-Date, as written (revisits repeat it)
    PRIMARY KEY (campaign, digest)
);

-- What a frontier URL is fetched as: a page (its links followed) or a page
-- requisite (an image, stylesheet, script or font a page needs to render;
-- scope.requisites), counted apart. The default keeps the inserts of nodes
-- not yet upgraded working, and adds the column without rewriting the table.
ALTER TABLE frontier ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'page';
