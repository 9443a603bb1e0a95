-- Processors (issue 13): each fetched page a processor wants costs a
-- page_bodies row and a deliveries row, both deleted within seconds. Two
-- things on them cost more than they guard:
--
-- The unique index on page_bodies.token took a random place in a b-tree
-- for every body (a token is random): 0.8 s of a single backend's time
-- per 100,000 bodies, measured, more than the rest of the insert. A body
-- token now starts with its page's id (store.bodyToken), and a body is
-- looked up by the page's key and the token compared. Tokens written
-- before this carry no id: only they are indexed by token, so a body
-- kept by an older node is still found by its token.
ALTER TABLE page_bodies DROP CONSTRAINT IF EXISTS page_bodies_token_key;
CREATE INDEX IF NOT EXISTS page_bodies_token_legacy ON page_bodies (token) WHERE length(token) <> 48;

-- The campaign foreign keys checked each row (0.3 s per 100,000 rows of
-- each table, measured). Campaigns are never deleted by spiderpool, and
-- both tables are emptied as their pages are processed.
ALTER TABLE page_bodies DROP CONSTRAINT IF EXISTS page_bodies_campaign_fkey;
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_campaign_fkey;
