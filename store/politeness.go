package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HostClaim is what a node learns when it claims a host.
type HostClaim struct {
	// Granted is false while another node's claim is live.
	Granted bool
	// Wait is how long until the host's next request may start.
	Wait time.Duration
	// ExtraDelay is the delay learned from the host's 5xx answers.
	ExtraDelay time.Duration
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// ClaimHost makes node the one node fetching from a host, until ttl
// passes without a renewal. A claim held by a node that died lapses after
// its ttl.
func (s *Store) ClaimHost(ctx context.Context, campaignKey int64, shardKey, node string, ttl time.Duration) (HostClaim, error) {
	var c HostClaim
	var waitMs, extraMs int64
	err := s.pool.QueryRow(ctx, `
		UPDATE hosts SET claim_node = $3, claim_until = now() + $4::bigint * interval '1 millisecond'
		WHERE campaign = $1 AND shard_key = $2
		  AND (claim_node IS NULL OR claim_node = $3 OR claim_until < now())
		RETURNING (extract(epoch FROM greatest(next_allowed_at, now()) - now()) * 1000)::bigint, extra_delay_ms`,
		campaignKey, shardKey, node, ms(ttl)).Scan(&waitMs, &extraMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("claim host %s: %w", shardKey, err)
	}
	return HostClaim{Granted: true, Wait: time.Duration(waitMs) * time.Millisecond, ExtraDelay: time.Duration(extraMs) * time.Millisecond}, nil
}

// RenewHost extends node's claim and records when the host's next request
// may start. It returns false if the claim was lost.
func (s *Store) RenewHost(ctx context.Context, campaignKey int64, shardKey, node string, ttl, nextIn, extra time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE hosts SET claim_until = now() + $4::bigint * interval '1 millisecond',
			next_allowed_at = greatest(next_allowed_at, now() + $5::bigint * interval '1 millisecond'),
			extra_delay_ms = $6
		WHERE campaign = $1 AND shard_key = $2 AND claim_node = $3`,
		campaignKey, shardKey, node, ms(ttl), ms(nextIn), ms(extra))
	if err != nil {
		return false, fmt.Errorf("renew host %s: %w", shardKey, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseHost ends node's claim, leaving when the next request may start.
func (s *Store) ReleaseHost(ctx context.Context, campaignKey int64, shardKey, node string, nextIn, extra time.Duration) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE hosts SET claim_node = NULL, claim_until = NULL,
			next_allowed_at = greatest(next_allowed_at, now() + $4::bigint * interval '1 millisecond'),
			extra_delay_ms = $5
		WHERE campaign = $1 AND shard_key = $2 AND claim_node = $3`,
		campaignKey, shardKey, node, ms(nextIn), ms(extra))
	if err != nil {
		return fmt.Errorf("release host %s: %w", shardKey, err)
	}
	return nil
}

// CoolHost holds every request to a host (on any node) and its leasing for
// at least d: a Retry-After, or a robots.txt that cannot be had.
func (s *Store) CoolHost(ctx context.Context, campaignKey int64, shardKey string, d time.Duration) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE hosts SET next_allowed_at = greatest(next_allowed_at, now() + $3::bigint * interval '1 millisecond')
		WHERE campaign = $1 AND shard_key = $2`, campaignKey, shardKey, ms(d))
	if err != nil {
		return fmt.Errorf("cool host %s: %w", shardKey, err)
	}
	return nil
}

// RobotsFile is a stored robots.txt.
type RobotsFile struct {
	Status    int
	Body      []byte
	ExpiresIn time.Duration
}

// Robots returns the stored robots.txt of an origin, if one has not
// expired.
func (s *Store) Robots(ctx context.Context, campaignKey int64, origin string) (RobotsFile, bool, error) {
	var f RobotsFile
	var expMs int64
	err := s.pool.QueryRow(ctx, `
		SELECT status, body, (extract(epoch FROM expires_at - now()) * 1000)::bigint
		FROM robots WHERE campaign = $1 AND origin = $2 AND expires_at > now()`, campaignKey, origin).
		Scan(&f.Status, &f.Body, &expMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, false, nil
	}
	if err != nil {
		return f, false, fmt.Errorf("robots.txt of %s: %w", origin, err)
	}
	f.ExpiresIn = time.Duration(expMs) * time.Millisecond
	return f, true, nil
}

// PutRobots stores an origin's robots.txt for ttl.
func (s *Store) PutRobots(ctx context.Context, campaignKey int64, origin string, status int, body []byte, ttl time.Duration) error {
	if body == nil {
		body = []byte{}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO robots (campaign, origin, status, body, expires_at)
		VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 millisecond')
		ON CONFLICT (campaign, origin) DO UPDATE SET status = EXCLUDED.status, body = EXCLUDED.body,
			fetched_at = now(), expires_at = EXCLUDED.expires_at`,
		campaignKey, origin, status, body, ms(ttl))
	if err != nil {
		return fmt.Errorf("store robots.txt of %s: %w", origin, err)
	}
	return nil
}

// RetryFailed puts a campaign's failed URLs back to pending with their
// attempts reset, and returns how many.
func (s *Store) RetryFailed(ctx context.Context, campaignKey int64) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE frontier SET state = 'pending', attempts = 0, next_attempt_at = now(), finished_at = NULL
		WHERE campaign = $1 AND state = 'failed'`, campaignKey)
	if err != nil {
		return 0, fmt.Errorf("re-queue failed URLs of campaign %d: %w", campaignKey, err)
	}
	return int(tag.RowsAffected()), nil
}
