-- Processors with "unchanged": "last_version" (issue 31, item 10): in a
-- recurring campaign, a page that answered 304 or was not due keeps the
-- items its last version got, copied from the run that fetched that
-- version into this run, without a call to the processor and without a
-- body kept.
--
-- version_run is the campaign (run of the series) that fetched the URL's
-- last version: set by a visit that fetched a version, kept by a 304,
-- cleared when the URL is gone. NULL for versions fetched before this
-- column: such a page carries nothing until it is fetched again.
ALTER TABLE url_history ADD COLUMN IF NOT EXISTS version_run bigint;

-- carried_from marks a carried item with the run whose fetch made it;
-- NULL for an item the processor returned in this run.
ALTER TABLE items ADD COLUMN IF NOT EXISTS carried_from bigint;
