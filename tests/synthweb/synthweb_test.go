package synthweb

import (
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// get requests url as agent and fails the test unless it answers status.
func get(t *testing.T, c *http.Client, agent, url string, status int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", agent)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s as %s: %v", url, agent, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("GET %s as %s: status %d, want %d", url, agent, resp.StatusCode, status)
	}
}

func start(t *testing.T, cfg Config) *Web {
	t.Helper()
	w, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// TestHostLatencyOverridesLatency: host 0's zero and host 1's 100ms replace
// a 10s Latency; a client giving up after 5s fails the test if either
// host still waits the 10s, or adds it.
func TestHostLatencyOverridesLatency(t *testing.T) {
	w := start(t, Config{Hosts: 2, Pages: 4, Seed: 1, Latency: 10 * time.Second,
		HostLatency: map[int]time.Duration{0: 0, 1: 100 * time.Millisecond}})
	c := &http.Client{Timeout: 5 * time.Second}
	get(t, c, "t", w.URL(0, 0), 200)
	began := time.Now()
	get(t, c, "t", w.URL(1, 0), 200)
	if took := time.Since(began); took < 100*time.Millisecond {
		t.Errorf("host 1 answered in %v, want at least its HostLatency 100ms", took)
	}
}

// TestRootsSeedEveryHost: one root per host, each a page of the web that
// links on into its own host's tree.
func TestRootsSeedEveryHost(t *testing.T) {
	w := start(t, Config{Hosts: 3, Pages: 30, Seed: 1})
	roots := w.Roots()
	if len(roots) != 3 {
		t.Fatalf("Roots() = %v, want one per host", roots)
	}
	for h, r := range roots {
		if r != w.URL(h, 0) || !slices.Contains(w.Pages(), r) {
			t.Errorf("root %d = %s, want %s, a page of the web", h, r, w.URL(h, 0))
		}
		if links := w.links(h, 0); !slices.Contains(links, "/p/1.html") {
			t.Errorf("root of host %d links %v, not its page 1", h, links)
		}
	}
}

// TestRequestsCountedPerAgent: two agents crawl the same web; each agent's
// tally sees only its own requests, and the log names the agent of each.
func TestRequestsCountedPerAgent(t *testing.T) {
	for _, countOnly := range []bool{false, true} {
		w := start(t, Config{Hosts: 2, Pages: 10, Seed: 1, CountOnly: countOnly})
		c := &http.Client{}
		pages := w.Pages()
		for _, p := range pages {
			get(t, c, "agent-a", p, 200)
		}
		for _, p := range pages[1:] { // b misses the first page and fetches the last twice
			get(t, c, "agent-b", p, 200)
		}
		last := pages[len(pages)-1]
		get(t, c, "agent-b", last, 200)
		robots := "http://" + w.Hosts()[0] + "/robots.txt"
		get(t, c, "agent-a", robots, 404)
		get(t, c, "agent-b", robots, 404)

		if m, d := w.TallyAgent("agent-a"); m != 0 || d != 0 {
			t.Errorf("CountOnly=%v: agent-a missing %d, duplicates %d; want 0, 0", countOnly, m, d)
		}
		if m, d := w.TallyAgent("agent-b"); m != 1 || d != 1 {
			t.Errorf("CountOnly=%v: agent-b missing %d, duplicates %d; want 1, 1", countOnly, m, d)
		}
		if m, d := w.TallyAgent("nobody"); m != len(pages) || d != 0 {
			t.Errorf("CountOnly=%v: an unseen agent missing %d, duplicates %d; want %d, 0", countOnly, m, d, len(pages))
		}
		if n := w.HitsBy("agent-b")[last]; n != 2 {
			t.Errorf("CountOnly=%v: agent-b hit %s %d times, want 2", countOnly, last, n)
		}
		if n := w.Hits()[last]; n != 3 {
			t.Errorf("CountOnly=%v: Hits() counts %s %d times over both agents, want 3", countOnly, last, n)
		}
		if n := w.Hits()[robots]; n != 2 {
			t.Errorf("CountOnly=%v: robots.txt of host 0 hit %d times, want 2", countOnly, n)
		}
		if countOnly {
			continue
		}
		agents := map[string]int{}
		for _, r := range w.Log(w.Hosts()[0]) {
			if r.Path == "/robots.txt" {
				agents[r.Agent]++
			}
		}
		if agents["agent-a"] != 1 || agents["agent-b"] != 1 || len(agents) != 2 {
			t.Errorf("robots.txt requests in host 0's log by agent: %v, want one each of agent-a and agent-b", agents)
		}
	}
}
