-- Processors (issue 13): the run (campaign.LeaseRun) whose first lease
-- last returned to pending what runs before it held (store's
-- ReleaseDeliveries, a lease with Reset). A lease of that run that finds
-- nothing pending takes back what other runs' batches still hold: a
-- batch of the run before, cut off at continue-as-new in the middle of
-- its lease, can commit that lease after the reset. A lease of any other
-- run never does, so a late lease of an ended run cannot take back the
-- live run's batches.
CREATE TABLE IF NOT EXISTS processor_runs (
    campaign bigint PRIMARY KEY,
    run      bigint NOT NULL
);
