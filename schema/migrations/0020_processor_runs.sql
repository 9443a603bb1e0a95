-- Processors (issue 13): which runs of a campaign may lease pages. run is
-- the live run (campaign.LeaseRun), the last whose first lease returned
-- to pending what runs before it held (store's ReleaseDeliveries, a lease
-- with Reset); ended has the last 32 runs it replaced.
--
-- A ProcessBatch child of a run is terminated when the run continues as
-- new, and a lease it had started (a local activity) could commit after
-- the next run's reset: its pages then waited in a batch that nobody
-- would store, and the campaign could complete without them. Now a lease
-- takes the campaign's run lock shared (an advisory lock, see
-- store.runLockSQL) and takes nothing for an ended run, and a reset takes
-- it exclusive: a lease under way commits before the reset, which then
-- returns what it took, and a lease after the reset finds its run ended.
-- A late reset of an ended run releases nothing. A lease that finds
-- nothing pending takes back what other runs' batches hold: batches of
-- its own run that leased before the run's reset did, and leases by
-- nodes not yet upgraded.
CREATE TABLE IF NOT EXISTS processor_runs (
    campaign bigint   PRIMARY KEY REFERENCES campaigns (key) ON DELETE CASCADE,
    run      bigint   NOT NULL,
    ended    bigint[] NOT NULL DEFAULT '{}'
);
