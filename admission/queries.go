package admission

import "sync"

// QueryCounts is a QueryCounter in memory, for the links one process
// adds. The zero value counts nothing yet; it is safe for concurrent use.
// Each host's count holds at most its cap; past maxCountedHosts hosts the
// counts start afresh, which errs towards crawling, as a host changing
// owner does.
type QueryCounts struct {
	mu   sync.Mutex
	seen map[campaignHost]map[uint64]struct{}
}

// maxCountedHosts bounds the hosts QueryCounts remembers.
const maxCountedHosts = 100_000

// campaignHost is one campaign's view of one host.
type campaignHost struct {
	campaign int64
	shard    string
}

// CountQuery reports whether fp is among the first limit URLs with a
// query of the campaign's host shard, counting it if it is new.
func (q *QueryCounts) CountQuery(campaignKey int64, shard string, fp uint64, limit int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := campaignHost{campaignKey, shard}
	set := q.seen[k]
	if set == nil {
		if q.seen == nil || len(q.seen) >= maxCountedHosts {
			q.seen = map[campaignHost]map[uint64]struct{}{}
		}
		set = map[uint64]struct{}{}
		q.seen[k] = set
	}
	if _, ok := set[fp]; ok {
		return true
	}
	if len(set) >= limit {
		return false
	}
	set[fp] = struct{}{}
	return true
}
