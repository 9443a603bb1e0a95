package crawler

import (
	"testing"

	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
)

// A claimed URL is requested as it was linked, but only when found_as is
// that: rows stored before issue 12 hold the raw href, often relative.
func TestLinkedForm(t *testing.T) {
	const canonical = "http://h.example/p?a=2&b=1"
	for _, c := range []struct {
		foundAs, want string
	}{
		{"http://h.example/p?b=1&a=2", "http://h.example/p?b=1&a=2"},
		{"", canonical},
		{"/p?b=1&a=2", canonical},                     // a raw relative href, from before
		{"http://h.example/other?b=1&a=2", canonical}, // not this page
		{"http://h.example/p?b=1&a=2&c=3", canonical}, // not this page either
	} {
		u, err := linked(store.ClaimedURL{URL: canonical, FoundAs: c.foundAs})
		if err != nil {
			t.Fatal(err)
		}
		if u.Linked() != c.want || u.String != canonical {
			t.Errorf("found_as %q: requests %q (canonical %q), want %q", c.foundAs, u.Linked(), u.String, c.want)
		}
	}
}

func TestLinkHeaderCanonical(t *testing.T) {
	self, err := crawl.Canonicalize("http://h.example/dir/page?x=1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		values []string
		want   string
	}{
		{[]string{`</style.css>; rel="preload"`, `<../c?b=1&a=2>; rel="canonical"`}, "http://h.example/c?b=1&a=2"},
		{[]string{`<http://other.example/x>; rel=preload, <http://h.example/y>; REL="alternate canonical"`}, "http://h.example/y"},
		{[]string{`<http://h.example/y>; rel="next"`}, ""},
		{[]string{`garbage; rel=canonical`}, ""},
	} {
		if got := linkHeaderCanonical(self, c.values); got != c.want {
			t.Errorf("Link %q: canonical %q, want %q", c.values, got, c.want)
		}
	}
}
