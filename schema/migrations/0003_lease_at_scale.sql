-- Leasing and idle polls at any frontier size: each statement a lease or
-- an idle poll runs reads an index, and only as far as the work it returns
-- (docs/scale.md has the plans at 10M rows, and what each index costs).
--
-- Additive for the nodes of earlier releases: their statements find the
-- columns and indexes they use, or plans as good without the one dropped.
--
-- Each index is built here in the migration's transaction, which holds
-- writes to the frontier meanwhile (about 5 s an index at 10M rows). On a
-- large live frontier build them first, by hand, with CREATE INDEX
-- CONCURRENTLY under the same names: IF NOT EXISTS then skips them.

-- Where the last lease's walk round the campaign's hosts stopped: the
-- next one resumes after it (store.dueHosts), instead of sorting every
-- host by when it was last leased.
ALTER TABLE campaigns ADD COLUMN lease_cursor bigint NOT NULL DEFAULT 0;

-- URLs pending again after a lease: in retry backoff, handed back, or
-- their lease expired. Under a page budget they are leased first (they
-- are admitted already), and only they can be due later than now. Few
-- rows: an entry is written only when a URL goes back to pending.
CREATE INDEX IF NOT EXISTS frontier_readmitted ON frontier (campaign, host_id, depth, id)
    WHERE state = 'pending' AND first_leased_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS frontier_put_off ON frontier (campaign, next_attempt_at)
    WHERE state = 'pending' AND first_leased_at IS NOT NULL;

-- Expiry reads what expired, not every row in flight: unclaimed leases by
-- when they expire, claimed ones by holder (store.expireLeases lists a
-- campaign's holders with a skip scan). Together these two replace
-- frontier_lease_expiry, which took an entry at the lease and another at
-- the claim: as many writes as before.
CREATE INDEX IF NOT EXISTS frontier_unclaimed ON frontier (campaign, lease_expires_at)
    WHERE state = 'leased' AND lease_holder IS NULL;
CREATE INDEX IF NOT EXISTS frontier_held ON frontier (campaign, lease_holder)
    WHERE state = 'leased' AND lease_holder IS NOT NULL;
DROP INDEX IF EXISTS frontier_lease_expiry;

-- Hosts ever paused, by when their pause ends: the idle poll's next wake.
-- Most hosts never are, and a claim's updates leave paused_until alone.
CREATE INDEX IF NOT EXISTS host_state_paused ON host_state (paused_until)
    WHERE paused_until > '-infinity';
