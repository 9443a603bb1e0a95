package crawler

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
//
// An excluded link to a known URL would only have inserted it; a queued
// link may also lower a known URL's depth, or queue a URL excluded as too
// deep (see store.InsertURLs). So the table keeps with each fingerprint the
// least depth of a queued link committed to it, and lets shallower ones
// through.
type seenCache struct {
	mu     sync.Mutex
	tables map[int64]*seenTable
}

// seenTable is a fixed-size, two-way set of fingerprints; a new entry
// overwrites an old one where both ways are taken. A slot holds a
// fingerprint with bits 1-8, which the index of its pair of slots already
// says, replaced by a depth field: 1 + the least depth of a queued link,
// or noDepth if none is known. The field is never 0, so a slot never is:
// 0 marks an empty slot. One word, so a slot is read and written whole.
type seenTable struct {
	slots [seenSlots]atomic.Uint64
}

const (
	depthShift = 1
	depthMask  = 0xff << depthShift
	noDepth    = 0xff
)

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

// depthField is what a slot records of link l.
func depthField(l store.NewURL) uint64 {
	if l.ExcludedBecause != "" || l.Depth < 0 || l.Depth >= noDepth-1 {
		return noDepth
	}
	return uint64(l.Depth) + 1
}

// holds reports whether slot value v is fingerprint fp's; fp's slot pair
// says the bits v does not.
func holds(v, fp uint64) bool { return v != 0 && v&^depthMask == fp&^depthMask }

func fieldOf(v uint64) uint64 { return (v & depthMask) >> depthShift }

// lookup finds fingerprint fp and returns its depth field.
func (t *seenTable) lookup(fp uint64) (field uint64, ok bool) {
	i := fp & (seenSlots - 1)
	for _, j := range [2]uint64{i, i ^ 1} {
		if v := t.slots[j].Load(); holds(v, fp) {
			return fieldOf(v), true
		}
	}
	return 0, false
}

// add records that link l was committed, keeping the least depth known.
func (t *seenTable) add(l store.NewURL) {
	fp, field := l.Fingerprint, depthField(l)
	v := fp&^depthMask | field<<depthShift
	i := fp & (seenSlots - 1)
	for _, j := range [2]uint64{i, i ^ 1} {
		if old := t.slots[j].Load(); holds(old, fp) {
			if field < fieldOf(old) {
				t.slots[j].Store(v)
			}
			return
		}
	}
	if t.slots[i].Load() == 0 {
		t.slots[i].Store(v)
		return
	}
	t.slots[i^1].Store(v)
}

// settled reports whether committing link l could change nothing.
func (t *seenTable) settled(l store.NewURL) bool {
	field, known := t.lookup(l.Fingerprint)
	switch {
	case !known:
		return false
	case l.ExcludedBecause != "":
		return true // it would only have inserted the URL
	default: // no shallower than a queued link before
		return field != noDepth && uint64(l.Depth)+1 >= field
	}
}

// unseen returns the links whose commit could change the frontier.
func (t *seenTable) unseen(links []store.NewURL) []store.NewURL {
	out := links[:0:0]
	for _, l := range links {
		if !t.settled(l) {
			out = append(out, l)
		}
	}
	return out
}
