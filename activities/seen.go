package activities

import (
	"sync"
	"sync/atomic"

	"github.com/spiderpool/spiderpool/store"
)

// seenSlots is the size of one campaign's seen table: 1<<20 fingerprints,
// 8 MiB, whatever the campaign's size.
const seenSlots = 1 << 20

// seenCache remembers fingerprints this node knows to be in the frontier,
// so most discovered links (a page mostly links to pages already found)
// skip the insert: Postgres's unique index stays the truth, this only saves
// it work. It is lossy, never wrong: a fingerprint may be forgotten (then
// it is inserted again and deduplicated by Postgres) but never remembered
// without having been committed.
type seenCache struct {
	mu     sync.Mutex
	tables map[int64]*seenTable
}

// seenTable is a fixed-size, two-way set of fingerprints; a new entry
// overwrites an old one where both ways are taken.
type seenTable struct {
	slots [seenSlots]atomic.Uint64
}

func newSeenCache() *seenCache { return &seenCache{tables: map[int64]*seenTable{}} }

func (c *seenCache) table(campaignKey int64) *seenTable {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tables[campaignKey]
	if !ok {
		if len(c.tables) >= 8 { // a node serves few campaigns at once
			clear(c.tables)
		}
		t = &seenTable{}
		c.tables[campaignKey] = t
	}
	return t
}

func (t *seenTable) has(fp uint64) bool {
	if fp == 0 {
		return false // 0 marks an empty slot
	}
	i := fp & (seenSlots - 1)
	return t.slots[i].Load() == fp || t.slots[i^1].Load() == fp
}

func (t *seenTable) add(fp uint64) {
	if fp == 0 || t.has(fp) {
		return
	}
	i := fp & (seenSlots - 1)
	if t.slots[i].Load() == 0 {
		t.slots[i].Store(fp)
		return
	}
	t.slots[i^1].Store(fp)
}

// unseen returns the links not known to be in the frontier.
func (t *seenTable) unseen(links []store.NewURL) []store.NewURL {
	out := links[:0:0]
	for _, l := range links {
		if !t.has(l.Fingerprint) {
			out = append(out, l)
		}
	}
	return out
}
