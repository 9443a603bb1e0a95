package render

import (
	"fmt"
	"time"
)

// A page can hold memory that the JavaScript heap's cap does not count:
// typed arrays' buffers, DOM nodes (in a test, either grew a renderer
// past 3 GiB within a minute, and only the render's timeout ended it).
// So, while a Chromium runs, a watchdog reads its renderers' resident
// memory from the system every memoryEvery and kills one that holds more
// than Options.TabMemory: its tab crashes, and the render fails saying
// why (errMemory), as any crash does, so the browser is replaced and its
// other tabs go on. A renderer serves one tab (each has a browser
// context of its own, and frames stay in their page's process), so the
// kill takes no other page with it. The JavaScript heap is capped at the
// same figure, which its renderer reaches first: a backstop, and the
// only cap where the system does not tell (outside Linux).

// memoryEvery is how often the watchdog reads the renderers' memory: a
// page that allocates a GiB a second overshoots the cap by a quarter of
// that at most.
const memoryEvery = 250 * time.Millisecond

// defaultTabMemory is Options.TabMemory's default.
const defaultTabMemory = 1 << 30

// watchMemory kills in's renderers that hold more than TabMemory, until
// in stops.
func (b *Browser) watchMemory(in *instance) {
	tick := time.NewTicker(memoryEvery)
	defer tick.Stop()
	for {
		select {
		case <-in.ctx.Done():
			return
		case <-tick.C:
		}
		if !b.hasOpenTabs(in) {
			continue // no page to hold memory: spare the scan of /proc
		}
		for pid, rss := range renderersOver(in.dir, b.o.TabMemory) {
			in.memoryKills.Add(1) // before the kill: the tab's crash reads it
			if err := killProcess(pid); err != nil {
				in.memoryKills.Add(-1) // gone already
				continue
			}
			b.o.Log.Warn("renderer killed: a page held more memory than its cap",
				"pid", pid, "resident_mib", rss>>20, "cap_mib", b.o.TabMemory>>20)
		}
	}
}

func (b *Browser) hasOpenTabs(in *instance) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return in.open > 0
}

// tookMemory says whether a crash of one of in's tabs was the watchdog's
// kill, and counts it said.
func (in *instance) tookMemory() bool {
	for {
		n := in.memoryKills.Load()
		if n <= 0 {
			return false
		}
		if in.memoryKills.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// errMemory is the reason of a render whose renderer the watchdog killed.
func errMemory(limit int64) error {
	return fmt.Errorf("the page held more than %d MiB of memory (the node's cap for a tab)", limit>>20)
}
