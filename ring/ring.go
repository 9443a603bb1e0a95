// Package ring owns the weighted consistent hash that maps shard keys (hosts)
// onto crawl nodes.
//
// It is weighted rendezvous hashing (highest random weight): every node draws
// a pseudo-random u in (0,1) from the key and its own seed, and the key goes
// to the node with the smallest -ln(u)/w. That is an exponential race, so a
// node wins a key with probability w/Σw exactly, and changing one node's
// weight or presence moves only keys to or from that node: the theoretical
// minimum, with no virtual points to tune. A ring of points needs ~1000
// points per unit weight to get within ~3% balance and still moves a few
// keys between untouched nodes when weights change; rendezvous does neither.
//
// Lookup costs one xxhash of the key, one 64-bit mix per node and one
// logarithm per distinct weight (nodes with equal weight are compared on u
// alone), so it stays cheap for the node counts a crawl cluster has.
//
// The package is pure and deterministic: no clock, randomness, I/O or map
// iteration, so workflow code may hold a Ring and replay it.
package ring

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Node is one member of the ring. Weight is real-valued; 0 keeps the node a
// member that receives no keys (drained).
type Node struct {
	ID     string  `json:"id"`
	Weight float64 `json:"weight"`
}

// Ring is a weighted rendezvous hash over a set of nodes. The zero value is
// an empty ring. A Ring is not safe for concurrent mutation.
type Ring struct {
	members []member // sorted by id
	classes []class  // distinct positive weights, descending
	// draws lists members with positive weight in class order, then id
	// order within a class: the order of the scoring passes.
	draws []draw
}

// draw is what scoring one member needs, contiguous for the hot loop.
type draw struct {
	seed         uint64
	negInvWeight float64
	member       int
}

type member struct {
	id     string
	weight float64
	seed   uint64
}

// class groups the members that share one positive weight: among them only
// the largest u can win, so one logarithm serves the whole class.
type class struct {
	negInvWeight float64 // -1/w
	members      []int   // indexes into Ring.members
}

// New returns a ring holding nodes. It panics on an invalid weight, as Set
// does; callers validate operator input before it gets here.
func New(nodes ...Node) *Ring {
	r := &Ring{}
	for _, n := range nodes {
		r.set(n.ID, n.Weight)
	}
	r.rebuild()
	return r
}

// ValidWeight reports whether w can be a node weight: finite and >= 0.
func ValidWeight(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
		return fmt.Errorf("weight must be a finite number >= 0, got %v", w)
	}
	return nil
}

// Set adds the node or changes its weight. It panics if weight is invalid
// (see ValidWeight) or id is empty.
func (r *Ring) Set(id string, weight float64) {
	r.set(id, weight)
	r.rebuild()
}

func (r *Ring) set(id string, weight float64) {
	if id == "" {
		panic("ring: empty node id")
	}
	if err := ValidWeight(weight); err != nil {
		panic("ring: node " + id + ": " + err.Error())
	}
	i, found := r.find(id)
	if found {
		r.members[i].weight = weight
		return
	}
	r.members = slices.Insert(r.members, i, member{id: id, weight: weight, seed: xxhash.Sum64String(id)})
}

// Remove deletes the node; it is a no-op for an unknown id.
func (r *Ring) Remove(id string) {
	if i, found := r.find(id); found {
		r.members = slices.Delete(r.members, i, i+1)
		r.rebuild()
	}
}

// Weight returns the node's weight and whether it is a member.
func (r *Ring) Weight(id string) (float64, bool) {
	if i, found := r.find(id); found {
		return r.members[i].weight, true
	}
	return 0, false
}

// Nodes returns the members sorted by id.
func (r *Ring) Nodes() []Node {
	out := make([]Node, len(r.members))
	for i, m := range r.members {
		out[i] = Node{ID: m.id, Weight: m.weight}
	}
	return out
}

// Len is the number of members, drained ones included.
func (r *Ring) Len() int { return len(r.members) }

// Lookup returns the node that owns key, or false if no member has a
// positive weight.
func (r *Ring) Lookup(key string) (string, bool) {
	return r.LookupHash(xxhash.Sum64String(key))
}

// LookupHash is Lookup for a key already hashed with xxhash.Sum64.
//
// The score -ln(u)/w needs a logarithm, the costly part. With x = 1-u,
// x + x²/2 <= -ln(u) <= x/(1-x), tight for the small x that win; so a
// first pass bounds every member's score without one, and only members
// whose lower bound does not exceed the least upper bound (about one or
// two) take their logarithm. The result is exactly that of scoring all
// (TestBoundedLookupIsExact).
func (r *Ring) LookupHash(h uint64) (string, bool) {
	const onStack = 16
	n := len(r.classes)
	switch {
	case n == 0:
		return "", false
	case n == 1: // equal weights: the largest u wins, no logarithm needed
		top, _ := r.classTop(&r.classes[0], h)
		return r.members[top].id, true
	case len(r.draws) > onStack: // a large ring: bounds would not fit on the stack
		return r.lookupEvery(h)
	}
	var (
		lows  [onStack]float64
		upper = math.Inf(1)
	)
	draws := r.draws
	for k := range draws {
		d := &draws[k]
		uu := mix(h ^ d.seed)
		u := unit(uu) // in (0, 1)
		x := 1 - u
		num := -d.negInvWeight * x
		lows[k] = num * (1 + x/2)
		upper = min(upper, num/u)
	}
	best, bestScore := -1, math.Inf(1)
	limit := upper * (1 + 1e-9) // the margin keeps rounding from skipping a winner
	for k := range draws {
		if lows[k] > limit {
			continue
		}
		// Scores tie only when two members draw the same u with weights in
		// an exact ratio (or equal); draws are in weight order, then id
		// order, so the tie goes to the heavier, then the smaller id.
		d := &draws[k] // its draw again: cheaper than keeping all of them
		if s := score(d.negInvWeight, mix(h^d.seed)); s < bestScore {
			best, bestScore = d.member, s
		}
	}
	if best < 0 {
		return "", false
	}
	return r.members[best].id, true
}

// classTop is the member of c that draws the largest u for h (the first
// by id on a tie), and its draw: the only one of its class that can win.
func (r *Ring) classTop(c *class, h uint64) (int, uint64) {
	top, topU := -1, uint64(0)
	for _, i := range c.members {
		if u := mix(h ^ r.members[i].seed); top < 0 || u > topU {
			top, topU = i, u
		}
	}
	return top, topU
}

// lookupEvery scores every class: LookupHash's answer for rings with more
// distinct weights than it bounds on the stack.
func (r *Ring) lookupEvery(h uint64) (string, bool) {
	best, bestScore := -1, math.Inf(1)
	for _, c := range r.classes {
		top, topU := r.classTop(&c, h)
		if s := score(c.negInvWeight, topU); s < bestScore {
			best, bestScore = top, s
		}
	}
	if best < 0 {
		return "", false
	}
	return r.members[best].id, true
}

// Successors returns up to n members with positive weight in key's
// preference order: the owner first, then whoever would own key if every
// node before it were gone. Failover walks this list.
func (r *Ring) Successors(key string, n int) []string {
	h := xxhash.Sum64String(key)
	type scored struct {
		idx   int
		score float64
	}
	all := make([]scored, 0, len(r.members))
	for i, m := range r.members {
		if m.weight > 0 {
			all = append(all, scored{i, score(-1/m.weight, mix(h^m.seed))})
		}
	}
	// The same order LookupHash applies: score, then heavier, then id.
	slices.SortFunc(all, func(a, b scored) int {
		if c := cmpFloat(a.score, b.score); c != 0 {
			return c
		}
		ma, mb := r.members[a.idx], r.members[b.idx]
		if c := cmpFloat(mb.weight, ma.weight); c != 0 {
			return c
		}
		return strings.Compare(ma.id, mb.id)
	})
	if n > len(all) || n < 0 {
		n = len(all)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.members[all[i].idx].id
	}
	return out
}

// Next returns the member that takes key if node after is unavailable: the
// one after it in key's preference order, or the owner if after is not a
// candidate. It returns false when there is no other candidate.
func (r *Ring) Next(key, after string) (string, bool) {
	for _, id := range r.Successors(key, -1) {
		if id != after {
			return id, true
		}
	}
	return "", false
}

func (r *Ring) find(id string) (int, bool) {
	return slices.BinarySearchFunc(r.members, id, func(m member, id string) int { return strings.Compare(m.id, id) })
}

func (r *Ring) rebuild() {
	r.classes = r.classes[:0]
	for i, m := range r.members {
		if m.weight <= 0 {
			continue
		}
		j := slices.IndexFunc(r.classes, func(c class) bool { return c.negInvWeight == -1/m.weight })
		if j < 0 {
			r.classes = append(r.classes, class{negInvWeight: -1 / m.weight})
			j = len(r.classes) - 1
		}
		r.classes[j].members = append(r.classes[j].members, i)
	}
	// Heavier classes first (-1/w nearer 0): they win most keys and fix the
	// tie rule in LookupHash.
	slices.SortFunc(r.classes, func(a, b class) int { return cmpFloat(b.negInvWeight, a.negInvWeight) })
	r.draws = r.draws[:0]
	for _, c := range r.classes {
		for _, i := range c.members {
			r.draws = append(r.draws, draw{seed: r.members[i].seed, negInvWeight: c.negInvWeight, member: i})
		}
	}
}

// score is the node's finishing time in the exponential race: -ln(u)/w.
// Lookup and Successors share it so they agree to the last bit.
func score(negInvWeight float64, u uint64) float64 {
	return negInvWeight * math.Log(unit(u))
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mix is the splitmix64 finalizer: it turns key-hash XOR node-seed into an
// independent-looking draw per node.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit maps a draw to (0,1), never 0 or 1, so the logarithm stays finite and
// negative.
func unit(u uint64) float64 {
	return (float64(u>>11) + 0.5) / (1 << 53)
}
