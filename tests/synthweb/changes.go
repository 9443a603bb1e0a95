package synthweb

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"
)

// page names a generated page: page i of host h.
type page struct{ h, i int }

// pageState is what Change, Remove and Add made of one page.
type pageState struct {
	exists  bool // a page of the web, removed or not
	gone    bool // removed: answers 410
	version int  // how often Change (or, for a root, Add) changed it
	added   int  // pages Add put on the page's host, which a root links
}

func (s pageState) live() bool { return s.exists && !s.gone }

// state reads page (h,i)'s state in one lock, so a page is served as one
// version even while a test changes the web.
func (w *Web) state(h, i int) pageState {
	w.content.RLock()
	defer w.content.RUnlock()
	p := page{h, i}
	return pageState{
		exists:  i < w.perHost[h]+w.added[h],
		gone:    w.gone[p],
		version: w.versions[p],
		added:   w.added[h],
	}
}

// livePages lists the pages not removed, host by host in page order.
// w.content must be held.
func (w *Web) livePages() []page {
	var out []page
	for h, n := range w.perHost {
		for i := range n + w.added[h] {
			if !w.gone[page{h, i}] {
				out = append(out, page{h, i})
			}
		}
	}
	return out
}

func (w *Web) urls(ps []page) []string {
	out := make([]string, len(ps))
	for k, p := range ps {
		out[k] = w.URL(p.h, p.i)
	}
	return out
}

// Validators. The ETag names host, page and version, so it is unique on
// the web and changes exactly when the body does; Last-Modified moves on
// an hour per version, so a changed page is newer at HTTP's one-second
// resolution too.
var baseModified = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

func etag(h, i, version int) string { return fmt.Sprintf(`"h%d-p%d-v%d"`, h, i, version) }

func lastModified(version int) time.Time {
	return baseModified.Add(time.Duration(version) * time.Hour)
}

// notModified reports whether r's preconditions let a GET or HEAD be
// answered 304 (RFC 9110 §13.2.2): If-None-Match when sent, else
// If-Modified-Since at or after modified.
func notModified(r *http.Request, tag string, modified time.Time) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if inm := r.Header.Values("If-None-Match"); len(inm) > 0 {
		return etagListMatches(strings.Join(inm, ","), tag)
	}
	since, err := http.ParseTime(r.Header.Get("If-Modified-Since"))
	return err == nil && !modified.After(since)
}

// etagListMatches reports whether an If-None-Match value ("*" or a list of
// entity tags, weak or strong) names tag, by weak comparison. Entity tags
// may hold commas, so the list is scanned quote to quote, not split.
func etagListMatches(list, tag string) bool {
	for {
		list = strings.TrimLeft(list, " \t,")
		if list == "" {
			return false
		}
		if list[0] == '*' {
			return true
		}
		list = strings.TrimPrefix(list, "W/")
		if list[0] != '"' {
			return false // not an entity tag: nothing after it can be trusted
		}
		end := strings.IndexByte(list[1:], '"')
		if end < 0 {
			return false
		}
		if list[:end+2] == tag {
			return true
		}
		list = list[end+2:]
	}
}

// Streams of the draws of Change and Remove, so the same seed picks
// unrelated pages for each.
const (
	changeStream = 1
	removeStream = 2
)

// Change gives round(fraction × live pages) pages, drawn by seed among
// those not removed (roots and added pages included), a new version, and
// returns their URLs in Pages order. A changed page's body gains a line
// "version N", its ETag and Last-Modified change, and its links stay as
// they were. A page changed twice is at version 2.
func (w *Web) Change(fraction float64, seed int64) []string {
	w.content.Lock()
	defer w.content.Unlock()
	live := w.livePages()
	picked := pick(live, share("Change", fraction, len(live)), seed, changeStream)
	for _, p := range picked {
		w.versions[p]++
	}
	return w.urls(picked)
}

// Remove makes round(fraction × live pages) pages answer 410 Gone from now
// on and returns their URLs in Pages order; they leave Pages and
// DeadLinks. It draws them by seed among the leaves of the tree that makes
// every page reachable (pages with no tree children, never a root, added
// pages included), so every page left is still reachable; and when fewer
// leaves are left than asked for, it removes them all. Extra links to a
// removed page stay on the pages that have them.
func (w *Web) Remove(fraction float64, seed int64) []string {
	w.content.Lock()
	defer w.content.Unlock()
	live := w.livePages()
	leaves := slices.DeleteFunc(slices.Clone(live), func(p page) bool { return !w.isLeaf(p) })
	picked := pick(leaves, share("Remove", fraction, len(live)), seed, removeStream)
	for _, p := range picked {
		w.gone[p] = true
	}
	return w.urls(picked)
}

// isLeaf reports whether p has no children in the tree: page i links 2i+1
// and 2i+2 when they are among its host's pages at Start.
func (w *Web) isLeaf(p page) bool { return p.i > 0 && 2*p.i+1 >= w.perHost[p.h] }

// Removed lists the URLs of the pages Remove removed, in page order.
func (w *Web) Removed() []string {
	w.content.RLock()
	defer w.content.RUnlock()
	var out []page
	for p := range w.gone {
		out = append(out, p)
	}
	slices.SortFunc(out, comparePages)
	return w.urls(out)
}

// Add puts n new pages on the web, host by host in turn, each linked from
// its host's root and linking on like any page. It returns the new pages'
// URLs and those of the roots that now link them (each one version on,
// whatever the number of pages it gained), both in Pages order: what a
// re-crawl must download again besides the pages Change changed.
func (w *Web) Add(n int) (added, relinked []string) {
	w.content.Lock()
	defer w.content.Unlock()
	var news, roots []page
	total := 0
	for _, a := range w.added {
		total += a
	}
	for k := range n {
		h := (total + k) % len(w.hosts)
		news = append(news, page{h, w.perHost[h] + w.added[h]})
		w.added[h]++
		if !slices.Contains(roots, page{h, 0}) {
			roots = append(roots, page{h, 0})
			w.versions[page{h, 0}]++
		}
	}
	slices.SortFunc(news, comparePages)
	slices.SortFunc(roots, comparePages)
	return w.urls(news), w.urls(roots)
}

// share is round(fraction × n); fraction must be in [0, 1].
func share(op string, fraction float64, n int) int {
	if !(fraction >= 0 && fraction <= 1) {
		panic(fmt.Sprintf("synthweb: %s: fraction must be in [0, 1], got %v", op, fraction))
	}
	return int(math.Round(fraction * float64(n)))
}

// pick draws n of candidates (all when there are fewer) at random by seed,
// and returns them in page order.
func pick(candidates []page, n int, seed int64, stream uint64) []page {
	c := slices.Clone(candidates)
	rng := rand.New(rand.NewPCG(uint64(seed), stream))
	rng.Shuffle(len(c), func(a, b int) { c[a], c[b] = c[b], c[a] })
	c = c[:min(n, len(c))]
	slices.SortFunc(c, comparePages)
	return c
}

func comparePages(a, b page) int { return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(a.i, b.i)) }
