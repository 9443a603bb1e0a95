-- One index write fewer per URL leased. frontier_lease (lease_id) took an
-- entry at every lease and again at every claim, for lookups that need it
-- no more: claims and releases name their rows' ids (the primary key finds
-- them), a holder's hand-back finds its rows by frontier_held, and the
-- release of a run's unclaimed leases reads frontier_unclaimed.
DROP INDEX IF EXISTS frontier_lease;
