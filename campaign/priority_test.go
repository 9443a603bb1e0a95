package campaign

import "testing"

func TestPrioritiesTakeTheHighestRuleMatched(t *testing.T) {
	spec := Spec{Seeds: []string{"http://a/"}, Scope: Scope{Priorities: []PriorityRule{
		{Pattern: "/news/", Priority: 5}, {Pattern: "/news/breaking", Priority: 50}, {Pattern: `\.pdf$`, Priority: -3},
	}}}
	p, err := spec.CompilePriorities()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url         string
		floor, want int
	}{
		{"http://a/news/x", 0, 5}, {"http://a/news/breaking/1", 0, 50}, {"http://a/about", 0, 0},
		{"http://a/doc.pdf", 0, -3}, {"http://a/doc.pdf", 6, -3}, {"http://a/about", 8, 8}, {"http://a/news/x", 8, 5},
	} {
		if got := p.Of(c.url, c.floor); got != c.want {
			t.Errorf("Of(%s, %d) = %d, want %d", c.url, c.floor, got, c.want)
		}
	}
	for in, want := range map[float64]int{0.5: 0, 1: 10, 0: -10, 0.8: 6, 0.55: 1} {
		if got := SitemapPriority(in); got != want {
			t.Errorf("SitemapPriority(%v) = %d, want %d", in, got, want)
		}
	}
}
