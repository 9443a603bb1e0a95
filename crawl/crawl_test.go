package crawl

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	for _, tc := range []struct{ in, want, host string }{
		{"HTTP://Example.COM:80/a/./b/../c?b=2&a=1#frag", "http://example.com/a/c?a=1&b=2", "example.com"},
		{"http://127.0.0.1:8080/x?", "http://127.0.0.1:8080/x", "127.0.0.1:8080"},
		{"https://x.org:443/", "https://x.org/", "x.org"},
		{"http://x.org:443/", "http://x.org:443/", "x.org:443"},
		{"http://a.b", "http://a.b/", "a.b"},
		{"http://user:pw@x.org/p", "http://x.org/p", "x.org"},
		{"http://example.com./", "http://example.com/", "example.com"},
		{"http://[::1]:80/", "http://[::1]/", "[::1]"},
		{"  http://h/sp ace  ", "http://h/sp%20ace", "h"},
		{"https://a.b/ü?q=a b", "https://a.b/%C3%BC?q=a%20b", "a.b"},
		{"http://bücher.example/", "http://xn--bcher-kva.example/", "xn--bcher-kva.example"},
		// Sorting keeps each pair's bytes; equal keys keep their order.
		{"http://h/?z=%20&a=2&a=1", "http://h/?a=2&a=1&z=%20", "h"},
	} {
		u, err := Canonicalize(tc.in)
		if err != nil {
			t.Errorf("Canonicalize(%q): %v", tc.in, err)
			continue
		}
		if u.String != tc.want || u.Host != tc.host {
			t.Errorf("Canonicalize(%q) = %q host %q, want %q host %q", tc.in, u.String, u.Host, tc.want, tc.host)
		}
		again, err := Canonicalize(u.String)
		if err != nil || again.String != u.String {
			t.Errorf("canonical form of %q is not stable: %q -> %q (%v)", tc.in, u.String, again.String, err)
		}
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	for _, in := range []string{"ftp://x/", "mailto:a@b.c", "javascript:alert(1)", "http://exa mple.com/", "not a url", "", "file:///etc/passwd"} {
		if u, err := Canonicalize(in); err == nil {
			t.Errorf("Canonicalize(%q) = %q, want an error", in, u.String)
		}
	}
	if _, err := Canonicalize("ftp://x/"); !errors.Is(err, ErrNotHTTP) {
		t.Errorf("ftp error = %v, want ErrNotHTTP", err)
	}
}

func TestResolve(t *testing.T) {
	base, err := Canonicalize("http://h.com/a/b/c.html?q=1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, want string }{
		{"../d", "http://h.com/a/d"},
		{"?x=1", "http://h.com/a/b/c.html?x=1"},
		{"#f", "http://h.com/a/b/c.html?q=1"},
		{"//other.com/x", "http://other.com/x"},
		{"/abs", "http://h.com/abs"},
		{"HTTPS://H.COM:443", "https://h.com/"},
	} {
		u, err := Resolve(base, tc.ref)
		if err != nil || u.String != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.ref, u.String, err, tc.want)
		}
	}
	// A base built by hand (no parsed form) resolves the same way.
	if u, err := Resolve(URL{String: base.String}, "../d"); err != nil || u.String != "http://h.com/a/d" {
		t.Errorf("Resolve against unparsed base = %q, %v", u.String, err)
	}
	for _, ref := range []string{"mailto:x@y", "javascript:void(0)", "http://[bad"} {
		if _, err := Resolve(base, ref); err == nil {
			t.Errorf("Resolve(%q) succeeded, want an error", ref)
		}
	}
}

func TestFingerprintIsOfCanonicalForm(t *testing.T) {
	a, _ := Canonicalize("HTTP://EXAMPLE.com:80/x?b=1&a=2#top")
	b, _ := Canonicalize("http://example.com/x?a=2&b=1")
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatalf("same page, different fingerprints: %q %q", a.String, b.String)
	}
	c, _ := Canonicalize("http://example.com/y")
	if a.Fingerprint() == c.Fingerprint() {
		t.Fatal("different pages share a fingerprint")
	}
}

func TestShardKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		mode ShardBy
		want string
	}{
		{"http://a.example.co.uk:8080/x", ShardByHost, "a.example.co.uk:8080"},
		{"http://a.example.co.uk:8080/x", ShardByDomain, "example.co.uk"},
		{"http://b.example.co.uk/", ShardByDomain, "example.co.uk"},
		{"http://127.0.0.1:9000/", ShardByDomain, "127.0.0.1:9000"},
		{"http://localhost/", ShardByDomain, "localhost"},
	} {
		u, err := Canonicalize(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := ShardKey(u, tc.mode); got != tc.want {
			t.Errorf("ShardKey(%q, %s) = %q, want %q", tc.in, tc.mode, got, tc.want)
		}
	}
}

func TestScope(t *testing.T) {
	s := Scope{
		Hosts:        []string{"seed.org:8080"},
		Domains:      []string{"example.com"},
		Exclude:      []*regexp.Regexp{regexp.MustCompile(`/private/`)},
		MaxDepth:     2,
		MaxURLLength: 60,
	}
	for _, tc := range []struct {
		url   string
		depth int
		want  Verdict
	}{
		{"http://seed.org:8080/a", 1, InScope},
		{"http://seed.org/a", 1, OutOfScopeHost},
		{"http://www.example.com/a", 2, InScope},
		{"http://example.com/a", 0, InScope},
		{"http://notexample.com/a", 0, OutOfScopeHost},
		{"http://example.com/a", 3, TooDeep},
		{"http://notexample.com/a", 3, OutOfScopeHost}, // never recorded as too deep
		{"http://example.com/private/x", 0, Excluded},
		{"http://example.com/" + strings.Repeat("x", 60), 0, TooLong},
	} {
		u, err := Canonicalize(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Check(u, tc.depth); got != tc.want {
			t.Errorf("Check(%s, %d) = %q, want %q", tc.url, tc.depth, got, tc.want)
		}
	}
	rep := Scope{MaxDepth: -1, MaxPathRepeats: 3}
	trap, _ := Canonicalize("http://h/a/b/a/b/a/b/a/x.html")
	fine, _ := Canonicalize("http://h/a/b/a/b/a/x.html")
	if rep.Check(trap, 0) != RepeatedPath || rep.Check(fine, 0) != InScope || !RepeatedPath.Recorded() || OutOfScopeHost.Recorded() {
		t.Errorf("path repetition: %q on %s, %q on %s", rep.Check(trap, 0), trap.String, rep.Check(fine, 0), fine.String)
	}
	inc := Scope{MaxDepth: -1, Include: []*regexp.Regexp{regexp.MustCompile(`\.html$`)}}
	u1, _ := Canonicalize("http://any.host/deep/page.html")
	u2, _ := Canonicalize("http://any.host/img.png")
	if inc.Check(u1, 99) != InScope || inc.Check(u2, 0) != NotIncluded {
		t.Error("include patterns not applied")
	}
}

func TestExtractLinks(t *testing.T) {
	doc := `<!doctype html><html><head><title> Hello
	  World </title><base href="http://b.example/dir/"></head>
	<body><a href="/one">1</a><A HREF='two'>2</A><a>no href</a><a href="">empty</a>
	<area href="three"><iframe src="four"></iframe><img src="not-a-link.png">
	<a href="one">dup</a><p><a href=five>unclosed`
	p := ExtractLinks([]byte(doc), 0)
	if p.Title != "Hello World" {
		t.Errorf("title = %q", p.Title)
	}
	if p.Base != "http://b.example/dir/" {
		t.Errorf("base = %q", p.Base)
	}
	want := []string{"/one", "two", "three", "four", "one", "five"}
	if strings.Join(p.Links, ",") != strings.Join(want, ",") {
		t.Errorf("links = %q, want %q", p.Links, want)
	}
	if p.NoFollow || p.Truncated {
		t.Errorf("nofollow=%v truncated=%v", p.NoFollow, p.Truncated)
	}
}

func TestExtractLinksHostileInput(t *testing.T) {
	var b strings.Builder
	b.WriteString("<title>\xff\xfe bad \x00 utf8</title><meta name=ROBOTS content='noindex, NoFollow'>")
	for range 10_000 {
		b.WriteString(`<a href="/x">`)
	}
	b.WriteString("<a href=\"/unterminated")
	p := ExtractLinks([]byte(b.String()), 100)
	if len(p.Links) != 100 || !p.Truncated {
		t.Errorf("got %d links truncated=%v, want 100 and truncated", len(p.Links), p.Truncated)
	}
	if !p.NoFollow {
		t.Error("meta robots nofollow not seen")
	}
	if strings.ContainsRune(p.Title, 0) || !strings.Contains(p.Title, "bad") {
		t.Errorf("title = %q", p.Title)
	}
	if got := ExtractLinks(nil, 0); len(got.Links) != 0 || got.Title != "" {
		t.Errorf("empty document gave %+v", got)
	}
}
