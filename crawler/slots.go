package crawler

import "sync"

// fairSlots caps a node's requests in flight and shares them among the
// campaigns on the node: when a slot frees and several campaigns wait, the
// one with the fewest requests running gets it, so a campaign with many
// hosts cannot starve one with few.
type fairSlots struct {
	mu      sync.Mutex
	free    int
	running map[int64]int
	waiting map[int64][]chan struct{} // per campaign, first come first served
}

func newFairSlots(n int) *fairSlots {
	return &fairSlots{free: max(1, n), running: map[int64]int{}, waiting: map[int64][]chan struct{}{}}
}

// take waits for a slot for campaign; false if stop closed first.
func (s *fairSlots) take(campaign int64, stop <-chan struct{}) bool {
	s.mu.Lock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		s.running[campaign]++
		s.mu.Unlock()
		return true
	}
	ch := make(chan struct{}, 1)
	s.waiting[campaign] = append(s.waiting[campaign], ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-stop:
	}
	s.mu.Lock()
	q := s.waiting[campaign]
	for i, c := range q {
		if c == ch {
			s.waiting[campaign] = append(q[:i:i], q[i+1:]...)
			if len(s.waiting[campaign]) == 0 {
				delete(s.waiting, campaign)
			}
			s.mu.Unlock()
			return false
		}
	}
	s.mu.Unlock()
	s.give(campaign) // granted while stopping: hand it on
	return false
}

// give returns campaign's slot, to the waiting campaign with the fewest
// requests running.
func (s *fairSlots) give(campaign int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[campaign]--; s.running[campaign] <= 0 {
		delete(s.running, campaign)
	}
	var next int64
	found := false
	for c := range s.waiting {
		if !found || s.running[c] < s.running[next] || (s.running[c] == s.running[next] && c < next) {
			next, found = c, true
		}
	}
	if !found {
		s.free++
		return
	}
	q := s.waiting[next]
	ch := q[0]
	if len(q) == 1 {
		delete(s.waiting, next)
	} else {
		s.waiting[next] = q[1:]
	}
	s.running[next]++
	ch <- struct{}{}
}
