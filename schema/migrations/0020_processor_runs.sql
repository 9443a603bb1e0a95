-- Processors (issue 13): which runs of a campaign may lease pages. run is
-- the live run (campaign.LeaseRun), the last whose first lease returned
-- to pending what runs before it held (store's ReleaseDeliveries, a lease
-- with Reset); ended has the runs it replaced.
--
-- A ProcessBatch child of a run is terminated when the run continues as
-- new, and a lease it had started (a local activity) could commit after
-- the next run's reset: its pages then waited in a batch that nobody
-- would store, and the campaign could complete without them. Now a lease
-- holds this row FOR SHARE and takes nothing for an ended run, and a
-- reset locks it FOR UPDATE, so a lease either commits before the reset
-- (which returns what it took) or sees its run ended. A late reset of an
-- ended run releases nothing. And a lease of the live run that finds
-- nothing pending takes back what other runs' batches hold, for leases
-- made by nodes not yet upgraded.
CREATE TABLE IF NOT EXISTS processor_runs (
    campaign bigint   PRIMARY KEY REFERENCES campaigns (key) ON DELETE CASCADE,
    run      bigint   NOT NULL,
    ended    bigint[] NOT NULL DEFAULT '{}'
);
