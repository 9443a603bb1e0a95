package ring

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

const testKeys = 1_000_000

func keyHashes(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = xxhash.Sum64String(fmt.Sprintf("host-%d.example", i))
	}
	return hs
}

func equalNodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("node-%02d", i), Weight: 1}
	}
	return nodes
}

func assign(r *Ring, hs []uint64) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i], _ = r.LookupHash(h)
	}
	return out
}

func TestBalanceEqualWeights(t *testing.T) {
	hs := keyHashes(testKeys)
	r := New(equalNodes(16)...)
	counts := map[string]int{}
	for _, n := range assign(r, hs) {
		counts[n]++
	}
	if len(counts) != 16 {
		t.Fatalf("keys landed on %d nodes, want 16", len(counts))
	}
	mean := float64(testKeys) / 16
	maxCount := 0
	for _, c := range counts {
		maxCount = max(maxCount, c)
	}
	ratio := float64(maxCount) / mean
	t.Logf("16 equal nodes x %d keys: max/mean = %.4f", testKeys, ratio)
	if ratio > 1.02 {
		t.Fatalf("max/mean = %.4f, want <= 1.02", ratio)
	}
}

func TestBalanceFollowsWeights(t *testing.T) {
	hs := keyHashes(testKeys)
	r := New(Node{"a", 1}, Node{"b", 1}, Node{"c", 2}, Node{"d", 0.5})
	counts := map[string]int{}
	for _, n := range assign(r, hs) {
		counts[n]++
	}
	total := 4.5
	for _, n := range r.Nodes() {
		want := float64(testKeys) * n.Weight / total
		got := float64(counts[n.ID])
		if dev := math.Abs(got-want) / want; dev > 0.01 {
			t.Errorf("node %s weight %v: %v keys, want %v (%.2f%% off)", n.ID, n.Weight, got, want, dev*100)
		}
	}
}

// movement changes a 16-node ring with change, then checks that keys moved
// only to or from the touched node and that their count is within 5% of the
// theoretical minimum.
func movement(t *testing.T, touched string, minFraction float64, change func(*Ring)) {
	t.Helper()
	hs := keyHashes(testKeys)
	r := New(equalNodes(16)...)
	before := assign(r, hs)
	change(r)
	after := assign(r, hs)
	moved := 0
	for i := range hs {
		if before[i] == after[i] {
			continue
		}
		moved++
		if before[i] != touched && after[i] != touched {
			t.Fatalf("key %d moved %s -> %s, between untouched nodes", i, before[i], after[i])
		}
	}
	theory := minFraction * testKeys
	ratio := float64(moved) / theory
	t.Logf("moved %d keys, theoretical minimum %.0f, ratio %.4f", moved, theory, ratio)
	if ratio > 1.05 {
		t.Fatalf("moved %d keys = %.4f x theoretical minimum %.0f, want <= 1.05", moved, ratio, theory)
	}
}

func TestMovementOnAdd(t *testing.T) {
	movement(t, "node-new", 1.0/17, func(r *Ring) { r.Set("node-new", 1) })
}

func TestMovementOnRemove(t *testing.T) {
	movement(t, "node-07", 1.0/16, func(r *Ring) { r.Remove("node-07") })
}

func TestMovementOnReweight(t *testing.T) {
	// node-03 goes 1 -> 2: its share goes from 1/16 to 2/17.
	movement(t, "node-03", 2.0/17-1.0/16, func(r *Ring) { r.Set("node-03", 2) })
}

func TestMovementOnDrain(t *testing.T) {
	movement(t, "node-11", 1.0/16, func(r *Ring) { r.Set("node-11", 0) })
}

func TestDrainedNodeGetsNothing(t *testing.T) {
	r := New(Node{"a", 1}, Node{"b", 0})
	for _, h := range keyHashes(10_000) {
		if n, _ := r.LookupHash(h); n != "a" {
			t.Fatalf("key went to %q, want a", n)
		}
	}
	if _, ok := New(Node{"b", 0}).Lookup("x"); ok {
		t.Fatal("lookup on an all-drained ring succeeded")
	}
	if _, ok := (&Ring{}).Lookup("x"); ok {
		t.Fatal("lookup on the zero ring succeeded")
	}
}

func TestSuccessorsAgreeWithLookup(t *testing.T) {
	r := New(Node{"a", 1}, Node{"b", 1}, Node{"c", 2}, Node{"d", 0.25}, Node{"e", 0})
	for i := range 20_000 {
		key := fmt.Sprintf("k%d", i)
		owner, _ := r.Lookup(key)
		succ := r.Successors(key, -1)
		if len(succ) != 4 {
			t.Fatalf("%d successors, want 4 (drained node excluded)", len(succ))
		}
		if succ[0] != owner {
			t.Fatalf("key %s: successors[0]=%s, lookup=%s", key, succ[0], owner)
		}
		// Removing the owner hands the key to the next successor.
		r2 := New(r.Nodes()...)
		r2.Remove(owner)
		if got, _ := r2.Lookup(key); got != succ[1] {
			t.Fatalf("key %s: after removing %s owner is %s, want successor %s", key, owner, got, succ[1])
		}
		if next, _ := r.Next(key, owner); next != succ[1] {
			t.Fatalf("Next(%s, %s) = %s, want %s", key, owner, next, succ[1])
		}
	}
}

// TestStableAssignments pins a few lookups. Workflow histories replay ring
// decisions, so a change to the hash or the mix must be deliberate.
func TestStableAssignments(t *testing.T) {
	r := New(Node{"node-1", 1}, Node{"node-2", 1}, Node{"node-3", 2})
	want := map[string]string{}
	for _, k := range []string{"127.0.0.1:8001", "127.0.0.1:8002", "example.com", "a.b.c", ""} {
		got, _ := r.Lookup(k)
		want[k] = got
	}
	golden := map[string]string{
		"127.0.0.1:8001": "node-1",
		"127.0.0.1:8002": "node-3",
		"example.com":    "node-3",
		"a.b.c":          "node-3",
		"":               "node-1",
	}
	for k, g := range golden {
		if want[k] != g {
			t.Errorf("Lookup(%q) = %s, pinned %s", k, want[k], g)
		}
	}
}

func TestInvalidWeights(t *testing.T) {
	for _, w := range []float64{-1, math.NaN(), math.Inf(1)} {
		if ValidWeight(w) == nil {
			t.Errorf("ValidWeight(%v) = nil", w)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Set with weight %v did not panic", w)
				}
			}()
			(&Ring{}).Set("a", w)
		}()
	}
}

func BenchmarkLookup(b *testing.B) {
	for _, tc := range []struct {
		name  string
		nodes []Node
	}{
		{"nodes=3_weights=1,1,2", []Node{{"node-1", 1}, {"node-2", 1}, {"node-3", 2}}},
		{"nodes=16_equal", equalNodes(16)},
		{"nodes=16_distinct", func() []Node {
			ns := equalNodes(16)
			for i := range ns {
				ns[i].Weight = 1 + float64(i)/4
			}
			return ns
		}()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := New(tc.nodes...)
			keys := make([]string, 4096)
			for i := range keys {
				keys[i] = fmt.Sprintf("host-%d.example.org", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r.Lookup(keys[i&4095])
			}
		})
	}
}

// TestBoundedLookupIsExact: the bounds LookupHash prunes with never change
// an answer from scoring every class.
func TestBoundedLookupIsExact(t *testing.T) {
	for _, nodes := range []int{2, 3, 7, 16, -6, -15} { // negative: weights repeat, classes share
		r := New()
		for i := range max(nodes, -nodes) {
			w := 0.25 + float64(i)*0.75
			if nodes < 0 {
				w = float64(1 + i%3)
			}
			r.Set(fmt.Sprintf("n%d", i), w)
		}
		for k := range 200_000 {
			h := xxhash.Sum64String(strconv.Itoa(k))
			got, _ := r.LookupHash(h)
			want, _ := r.lookupEvery(h)
			if got != want {
				t.Fatalf("%d nodes, key %d: bounded lookup says %s, scoring all says %s", nodes, k, got, want)
			}
		}
	}
}
