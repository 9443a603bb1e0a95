package render

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
)

// Pages that allocate without end, each a way around the JavaScript heap
// cap but the first: arrays (V8's heap), typed arrays (their buffers live
// outside it), DOM nodes (Blink's heap).
var hoarders = map[string]string{
	"/hoard/heap":    `<html><body><p>heap</p><script>var k=[];for(;;){k.push(new Array(1e5).fill(Math.random()))}</script></body></html>`,
	"/hoard/buffers": `<html><body><p>buffers</p><script>var k=[];for(;;){var b=new Uint8Array(1<<20);b.fill(1);k.push(b)}</script></body></html>`,
	"/hoard/dom":     `<html><body><p>dom</p><script>for(;;){var d=document.createElement("div");d.textContent="x".repeat(1000)+Math.random();document.body.appendChild(d)}</script></body></html>`,
}

// heldSite serves /held, a page whose script waits for /release, which
// answers once release is closed; asked says /release was asked for.
func heldSite(t *testing.T) (url string, asked <-chan struct{}, release chan<- struct{}) {
	t.Helper()
	a, r := make(chan struct{}, 1), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/held", html(`<html><body><p id="out">held</p><script>
fetch("/release").then(r => r.text()).then(t => { out.textContent = t })</script></body></html>`))
	mux.HandleFunc("/release", func(w http.ResponseWriter, req *http.Request) {
		a <- struct{}{}
		select {
		case <-r:
		case <-req.Context().Done():
		}
		fmt.Fprint(w, "released")
	})
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(mux)
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s.URL + "/held", a, r
}

// TestAPageThatAllocatesWithoutEndFailsAndOthersGoOn: each hoarding page
// fails, with a reason that names memory, once its renderer holds more
// than TabMemory, within a render timeout far longer; a page rendering in
// the browser's other tab meanwhile renders; the browser is replaced and
// the next page renders in the new one.
func TestAPageThatAllocatesWithoutEndFailsAndOthersGoOn(t *testing.T) {
	t.Parallel()
	s := newSite(t, hoarders)
	path, err := Find()
	if err != nil {
		t.Fatalf("these tests need Chromium: %v", err)
	}
	const limit = 320 << 20
	b, err := New(Options{Path: path, Plain: fetch.New(2, fetch.Guard{AllowPrivate: true}), TabMemory: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	peak := watchPeakRSS(t, b)
	ctx := context.Background()
	o := pageOptions(&fetch.Render{NetworkIdle: true, IdleCap: 5 * time.Second, Timeout: 90 * time.Second})
	heldOpts := pageOptions(&fetch.Render{NetworkIdle: true, IdleCap: 90 * time.Second, Timeout: 90 * time.Second})
	heldOpts.RequestTimeout = 90 * time.Second
	for _, p := range slices.Sorted(maps.Keys(hoarders)) {
		held, asked, release := heldSite(t)
		other := make(chan fetch.Response, 1)
		// The other page waits for /release as long as the render may.
		go func() { other <- b.Get(ctx, held, heldOpts) }()
		select {
		case <-asked:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the other tab's page never asked for /release", p)
		}
		before := liveDirs(b)
		r := b.Get(ctx, s.URL+p, o)
		if !errors.Is(r.Err, fetch.ErrRender) || !strings.Contains(r.Err.Error(), "memory") {
			t.Errorf("%s: err = %v, want an ErrRender that names memory", p, r.Err)
		}
		close(release)
		if r := <-other; r.Err != nil || !strings.Contains(string(r.Body), "released") {
			t.Errorf("%s: the other tab's page: err %v, body %.200q; want it rendered", p, r.Err, r.Body)
		}
		next := b.Get(ctx, s.URL+"/", o)
		if next.Err != nil || !strings.Contains(string(next.Body), "text-from-the-api") {
			t.Fatalf("%s: the next page: err %v, body %.200q", p, next.Err, next.Body)
		}
		if after := liveDirs(b); len(before) != 1 || len(after) != 1 || before[0] == after[0] {
			t.Errorf("%s: browsers before %v, after %v: want the one that held the page replaced", p, before, after)
		}
	}
	total, renderer := peak()
	t.Logf("peak resident memory: %d MiB summed over Chromium's processes, %d MiB in one renderer (cap %d MiB)", total>>20, renderer>>20, limit>>20)
}

// watchPeakRSS samples the resident memory of b's Chromium processes until
// the test ends; peak returns the largest sum seen, and the largest
// renderer.
func watchPeakRSS(t *testing.T, b *Browser) (peak func() (total, renderer int64)) {
	var mu sync.Mutex
	var maxTotal, maxRenderer int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var total, renderer int64
			for _, dir := range liveDirs(b) {
				for _, pid := range processesUsing(dir) {
					rss := residentBytes(pid)
					total += rss
					if cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline"); strings.Contains(string(cmd), "--type=renderer") {
						renderer = max(renderer, rss)
					}
				}
			}
			mu.Lock()
			maxTotal, maxRenderer = max(maxTotal, total), max(maxRenderer, renderer)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return func() (int64, int64) {
		mu.Lock()
		defer mu.Unlock()
		return maxTotal, maxRenderer
	}
}

// residentBytes is a process's VmRSS, 0 if it is gone.
func residentBytes(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
