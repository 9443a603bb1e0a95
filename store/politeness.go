package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Politeness state belongs to the host (the shard key), not to a campaign:
// host_state has one row per host for the whole cluster, so two campaigns
// crawling one site share its claim, its pace and its pauses, and the
// stricter of their settings holds for both.

// HostPolicy is the strictest politeness among the running campaigns that
// crawl a host.
type HostPolicy struct {
	MinDelay time.Duration
	// Concurrency is the least max_concurrency_per_host among them; 0 when
	// none is known.
	Concurrency int
}

// HostClaim is what a holder learns when it is granted a host.
type HostClaim struct {
	// Wait is how long until the host's next request may start.
	Wait time.Duration
	// ExtraDelay is the delay learned from the host's 5xx answers.
	ExtraDelay time.Duration
	// Latency is the host's moving average response time, as last written.
	Latency time.Duration
	// Policy is the host's strictest policy now (HostPolicies).
	Policy HostPolicy
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func fromMs(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// msUp is d in whole milliseconds, rounded up: a host's next start handed
// from one holder to the next through Postgres may come late, never early.
func msUp(d time.Duration) int64 {
	return (d + time.Millisecond - 1).Milliseconds()
}

// Statements that take many hosts' rows lock them in key order
// (ClaimHosts, its marking of the refused ones wanted, RenewHosts), and a
// claim leaves alone the rows another holder's live claim has: two nodes'
// claims and renewals over the same hosts never wait on each other in a
// cycle.

// ClaimHosts makes holder the one fetching from each of keys it can have
// until ttl passes without a renewal (a holder that died lets go after its
// ttl), and reads the granted hosts' policies (HostPolicies) with them, in
// one statement whatever their number: a node claims a new batch's hosts
// together. The answer has the granted hosts only. A refused claim marks
// the host wanted, so its holder shares it (see RenewHosts).
func (s *Store) ClaimHosts(ctx context.Context, keys []string, holder string, ttl time.Duration) (map[string]HostClaim, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys))) // one row each, locked in one order
	out := make(map[string]HostClaim, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
		WITH claimed AS (
			INSERT INTO host_state AS s (shard_key, claim_holder, claim_until)
			SELECT k, $2, now() + $3::bigint * interval '1 millisecond' FROM unnest($1::text[]) AS k
			WHERE NOT EXISTS (SELECT 1 FROM host_state o WHERE o.shard_key = k AND o.claim_holder <> $2 AND o.claim_until >= now())
			ORDER BY k
			ON CONFLICT (shard_key) DO UPDATE SET claim_holder = EXCLUDED.claim_holder, claim_until = EXCLUDED.claim_until,
				wanted_until = CASE WHEN s.claim_holder = EXCLUDED.claim_holder THEN s.wanted_until END
			WHERE s.claim_holder IS NULL OR s.claim_holder = EXCLUDED.claim_holder OR s.claim_until < now()
			RETURNING s.shard_key, ceil(extract(epoch FROM greatest(s.next_allowed_at, now()) - now()) * 1000)::bigint AS wait_ms,
			          s.extra_delay_ms, s.latency_ms
		), policy AS (`+strictestPolicies("IN (SELECT shard_key FROM claimed)")+`)
		SELECT claimed.shard_key, wait_ms, extra_delay_ms, latency_ms, coalesce(delay_ms, 0)::bigint, coalesce(concurrency, 0)::int
		FROM claimed LEFT JOIN policy USING (shard_key)`,
		keys, holder, ms(ttl))
	if err != nil {
		return nil, fmt.Errorf("claim %d hosts: %w", len(keys), err)
	}
	for rows.Next() {
		var key string
		var waitMs, extraMs, latencyMs, delayMs int64
		var concurrency int
		if err := rows.Scan(&key, &waitMs, &extraMs, &latencyMs, &delayMs, &concurrency); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim %d hosts: %w", len(keys), err)
		}
		out[key] = HostClaim{
			Wait: fromMs(waitMs), ExtraDelay: fromMs(extraMs), Latency: fromMs(latencyMs),
			Policy: HostPolicy{MinDelay: fromMs(delayMs), Concurrency: concurrency},
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim %d hosts: %w", len(keys), err)
	}
	if len(out) == len(keys) {
		return out, nil
	}
	refused := slices.DeleteFunc(keys, func(k string) bool { _, ok := out[k]; return ok })
	if _, err := s.pool.Exec(ctx, `
		UPDATE host_state SET wanted_until = now() + $2::bigint * interval '1 millisecond'
		WHERE shard_key IN (SELECT shard_key FROM host_state WHERE shard_key = ANY($1) AND claim_holder IS DISTINCT FROM $3
		                    ORDER BY shard_key FOR UPDATE)`, refused, ms(ttl), holder); err != nil {
		return nil, fmt.Errorf("claim %d hosts: mark %d wanted: %w", len(keys), len(refused), err)
	}
	return out, nil
}

// HeldHost is what a holder writes about a host it holds: when the next
// request may start and what it has learned of the host's pace.
type HeldHost struct {
	ShardKey   string
	NextIn     time.Duration
	ExtraDelay time.Duration
	Interval   time.Duration // least time between starts now applied
	Latency    time.Duration
}

// RenewHosts extends holder's claims on hosts in one statement and records
// each host's pace, so a holder that takes a host over keeps it. It returns
// the hosts still held, and among them those another holder asked for.
func (s *Store) RenewHosts(ctx context.Context, holder string, ttl time.Duration, hosts []HeldHost) (held, wanted map[string]bool, err error) {
	held, wanted = map[string]bool{}, map[string]bool{}
	if len(hosts) == 0 {
		return held, wanted, nil
	}
	keys, next, extra, interval, latency := heldColumns(hosts)
	rows, err := s.pool.Query(ctx, `
		UPDATE host_state s SET claim_until = now() + $2::bigint * interval '1 millisecond',
			next_allowed_at = greatest(s.next_allowed_at, now() + u.next_ms * interval '1 millisecond'),
			extra_delay_ms = u.extra, interval_ms = u.gap, latency_ms = u.latency
		FROM unnest($3::text[], $4::bigint[], $5::int[], $6::int[], $7::int[]) AS u(key, next_ms, extra, gap, latency)
		WHERE s.shard_key = u.key AND s.claim_holder = $1
		  AND s.shard_key IN (SELECT shard_key FROM host_state WHERE shard_key = ANY($3) AND claim_holder = $1
		                      ORDER BY shard_key FOR UPDATE)
		RETURNING s.shard_key, coalesce(s.wanted_until > now(), false)`,
		holder, ms(ttl), keys, next, extra, interval, latency)
	if err != nil {
		return nil, nil, fmt.Errorf("renew %d host claims: %w", len(hosts), err)
	}
	for rows.Next() {
		var key string
		var w bool
		if err := rows.Scan(&key, &w); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("renew %d host claims: %w", len(hosts), err)
		}
		held[key] = true
		if w {
			wanted[key] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("renew %d host claims: %w", len(hosts), err)
	}
	return held, wanted, nil
}

// ReleaseHost ends holder's claim, leaving when the host's next request may
// start and what was learned of its pace.
func (s *Store) ReleaseHost(ctx context.Context, holder string, h HeldHost) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE host_state SET claim_holder = NULL, claim_until = NULL, wanted_until = NULL,
			next_allowed_at = greatest(next_allowed_at, now() + $3::bigint * interval '1 millisecond'),
			extra_delay_ms = $4, interval_ms = $5, latency_ms = $6
		WHERE shard_key = $1 AND claim_holder = $2`,
		h.ShardKey, holder, msUp(h.NextIn), ms(h.ExtraDelay), ms(h.Interval), ms(h.Latency))
	if err != nil {
		return fmt.Errorf("release host %s: %w", h.ShardKey, err)
	}
	return nil
}

func heldColumns(hosts []HeldHost) (keys []string, next []int64, extra, interval, latency []int32) {
	for _, h := range hosts {
		keys = append(keys, h.ShardKey)
		next = append(next, msUp(h.NextIn)) // never earlier than the holder's next start
		extra = append(extra, int32(ms(h.ExtraDelay)))
		interval = append(interval, int32(ms(h.Interval)))
		latency = append(latency, int32(ms(h.Latency)))
	}
	return keys, next, extra, interval, latency
}

// PauseHost holds every request to a host, on any node and for every
// campaign, and its leasing, for at least d: a Retry-After, or a
// robots.txt that cannot be had.
func (s *Store) PauseHost(ctx context.Context, shardKey string, d time.Duration) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO host_state AS s (shard_key, paused_until, next_allowed_at)
		VALUES ($1, now() + $2::bigint * interval '1 millisecond', now() + $2::bigint * interval '1 millisecond')
		ON CONFLICT (shard_key) DO UPDATE SET
			paused_until = greatest(s.paused_until, EXCLUDED.paused_until),
			next_allowed_at = greatest(s.next_allowed_at, EXCLUDED.next_allowed_at)`, shardKey, ms(d))
	if err != nil {
		return fmt.Errorf("pause host %s: %w", shardKey, err)
	}
	return nil
}

// HostPolicies returns, for each of keys that a running campaign crawls,
// the strictest politeness among those campaigns.
func (s *Store) HostPolicies(ctx context.Context, keys []string) (map[string]HostPolicy, error) {
	out := make(map[string]HostPolicy, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, strictestPolicies("= ANY($1)"), keys)
	if err != nil {
		return nil, fmt.Errorf("host policies: %w", err)
	}
	for rows.Next() {
		var key string
		var delayMs int64
		var conc int
		if err := rows.Scan(&key, &delayMs, &conc); err != nil {
			rows.Close()
			return nil, fmt.Errorf("host policies: %w", err)
		}
		out[key] = HostPolicy{MinDelay: fromMs(delayMs), Concurrency: conc}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host policies: %w", err)
	}
	return out, nil
}

// strictestPolicies is the statement that reads, for each host whose
// shard key matches cond (a condition on h.shard_key), the strictest
// politeness of the running campaigns crawling it: its shard_key,
// delay_ms and concurrency (0: none known). HostPolicies and ClaimHosts
// read policies with it, so both mean the same by "strictest".
func strictestPolicies(cond string) string {
	return `SELECT h.shard_key, max(c.min_delay_ms) AS delay_ms, coalesce(min(nullif(c.host_concurrency, 0)), 0) AS concurrency
		FROM hosts h JOIN campaigns c ON c.key = h.campaign
		WHERE h.shard_key ` + cond + ` AND c.status = 'running'
		GROUP BY h.shard_key`
}

// PolicyChannel is the Postgres notification channel on which campaign
// starts and ends, and campaigns reaching hosts new to them, are announced:
// a host's strictest policy may have changed.
const PolicyChannel = "spiderpool_policy"

// ListenPolicies calls changed every time a campaign starts or ends, until
// ctx ends. It holds one connection; a lost connection is opened again, and
// changed is called once after each reconnect, since notifications may have
// been missed meanwhile. Through a transaction pooler (PgBouncer) a LISTEN
// hears nothing, and leaves the pooler notifications for no client: it
// only waits for ctx, and the policies are re-read as claims renew.
func (s *Store) ListenPolicies(ctx context.Context, changed func()) {
	if s.pooled {
		<-ctx.Done()
		return
	}
	for {
		_ = s.listen(ctx, changed) // a lost listener only delays the news: claims re-read policies as they renew
		if ctx.Err() != nil {
			return
		}
		changed() // whatever was announced while not listening
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listen(ctx context.Context, changed func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+PolicyChannel); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+PolicyChannel) //nolint:errcheck
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		changed()
	}
}

// RobotsFile is a stored robots.txt.
type RobotsFile struct {
	Status int
	Body   []byte
	// Age is how long ago it was fetched.
	Age time.Duration
}

// Robots returns an origin's stored robots.txt, fetched once for the
// cluster; the caller judges its age.
func (s *Store) Robots(ctx context.Context, origin string) (RobotsFile, bool, error) {
	var f RobotsFile
	var ageMs int64
	err := s.pool.QueryRow(ctx, `
		SELECT status, body, (extract(epoch FROM now() - fetched_at) * 1000)::bigint
		FROM robots_cache WHERE origin = $1`, origin).Scan(&f.Status, &f.Body, &ageMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, false, nil
	}
	if err != nil {
		return f, false, fmt.Errorf("robots.txt of %s: %w", origin, err)
	}
	f.Age = fromMs(ageMs)
	return f, true, nil
}

// PutRobots stores an origin's robots.txt as fetched now.
func (s *Store) PutRobots(ctx context.Context, origin string, status int, body []byte) error {
	if body == nil {
		body = []byte{}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO robots_cache (origin, status, body, fetched_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (origin) DO UPDATE SET status = EXCLUDED.status, body = EXCLUDED.body, fetched_at = now()`,
		origin, status, body)
	if err != nil {
		return fmt.Errorf("store robots.txt of %s: %w", origin, err)
	}
	return nil
}
