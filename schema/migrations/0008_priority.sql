-- Priorities (issue 15): a URL's priority orders its host's pending URLs,
-- higher first; within one priority, shallower first (breadth-first), then
-- in the order found. 0 is every URL's priority unless an operator adds it
-- with another. The pending indexes lead with it, so a lease still reads
-- only as far as it takes.
ALTER TABLE frontier ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS frontier_pending_by_priority ON frontier (campaign, host_id, priority DESC, depth, id)
    WHERE state = 'pending';
DROP INDEX IF EXISTS frontier_pending;

CREATE INDEX IF NOT EXISTS frontier_readmitted_by_priority ON frontier (campaign, host_id, priority DESC, depth, id)
    WHERE state = 'pending' AND first_leased_at IS NOT NULL;
DROP INDEX IF EXISTS frontier_readmitted;
