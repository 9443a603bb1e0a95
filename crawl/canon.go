// Package crawl owns the pure mechanics of a crawl: the canonical form of a
// URL and its fingerprint, shard keys, scope rules and link extraction from
// HTML. Nothing here does I/O, so workflow code, activities and the CLI share
// one definition of "the same URL".
package crawl

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/nlnwa/whatwg-url/canonicalizer"
	whatwg "github.com/nlnwa/whatwg-url/url"
	"golang.org/x/net/publicsuffix"
)

// URL is a canonical absolute http(s) URL.
type URL struct {
	// String is the canonical serialisation; two URLs are the same page
	// exactly when their Strings are equal.
	String string
	// AsLinked is String with the query in the order the link wrote it:
	// what is requested, matched against robots.txt and archived. The
	// canonical order only identifies the page; a server may read
	// "?b=1&a=2" differently from "?a=2&b=1", and robots.txt rules match
	// what is sent.
	AsLinked string
	// Scheme is "http" or "https".
	Scheme string
	// Host is the authority as serialised: hostname plus ":port" when the
	// port is not the scheme's default.
	Host string
	// Hostname is Host without the port (IPv6 keeps its brackets).
	Hostname string
	parsed   *whatwg.Url
}

// Path is the URL's path, as serialised.
func (u URL) Path() string {
	if u.parsed != nil {
		return u.parsed.Pathname()
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(u.String, u.Scheme+"://"), u.Host)
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// Target is the request target of the URL as linked: its path and query,
// as the request line sends them.
func (u URL) Target() string {
	if t := strings.TrimPrefix(u.Linked(), u.Scheme+"://"+u.Host); t != "" {
		return t
	}
	return "/"
}

// Linked is the URL to request: as linked, or the canonical form when the
// link's own form is not known (URLs stored before it was kept).
func (u URL) Linked() string {
	if u.AsLinked != "" {
		return u.AsLinked
	}
	return u.String
}

// HasQuery says whether the URL has a query string.
func (u URL) HasQuery() bool { return strings.Contains(u.String, "?") }

// Origin is scheme://host[:port], the unit robots.txt applies to.
func (u URL) Origin() string { return u.Scheme + "://" + u.Host }

// Fingerprint is the 64-bit identity of the canonical URL, unique per
// campaign in the frontier.
func (u URL) Fingerprint() uint64 { return Fingerprint(u.String) }

// Fingerprint hashes a canonical URL string with xxhash64.
func Fingerprint(canonical string) uint64 { return xxhash.Sum64String(canonical) }

// ErrNotHTTP is returned for URLs whose scheme is not http or https.
var ErrNotHTTP = errors.New("scheme is not http or https")

// The parser follows the WHATWG URL standard, as browsers do, so that what a
// page links to and what we fetch agree: it lower-cases scheme and host,
// applies IDNA, drops default ports, resolves dot segments and
// percent-encodes what must be. On top we drop the fragment (never sent to
// the server), user info, and order query parameters by key (stable query).
var parser = canonicalizer.New(
	canonicalizer.WithRemoveFragment(),
).(interface {
	whatwg.Parser
	Canonicalize(*whatwg.Url) (*whatwg.Url, error)
})

// Canonicalize parses an absolute URL into its canonical form.
func Canonicalize(raw string) (URL, error) {
	if u, ok := fastCanonical(strings.TrimSpace(raw)); ok {
		return u, nil
	}
	return slowCanonicalize(raw)
}

func slowCanonicalize(raw string) (URL, error) {
	u, err := parser.Parse(strings.TrimSpace(raw))
	if err != nil {
		return URL{}, fmt.Errorf("parse URL %q: %w", clip(raw), err)
	}
	return finish(u, raw)
}

// Resolve resolves ref against base (a canonical URL) and canonicalises it.
func Resolve(base URL, ref string) (URL, error) {
	ref = strings.TrimSpace(ref)
	if abs, ok := fastResolve(base, ref); ok {
		if u, ok := fastCanonical(abs); ok {
			return u, nil
		}
	}
	return slowResolve(base, ref)
}

func slowResolve(base URL, ref string) (URL, error) {
	ref = strings.TrimSpace(ref)
	var (
		u   *whatwg.Url
		err error
	)
	if base.parsed != nil {
		u, err = base.parsed.Parse(ref)
		if err == nil {
			u, err = parser.Canonicalize(u)
		}
	} else {
		u, err = parser.ParseRef(base.String, ref)
	}
	if err != nil {
		return URL{}, fmt.Errorf("resolve %q against %s: %w", clip(ref), base.String, err)
	}
	return finish(u, ref)
}

func finish(u *whatwg.Url, raw string) (URL, error) {
	scheme := u.Scheme()
	if scheme != "http" && scheme != "https" {
		return URL{}, fmt.Errorf("URL %q: %w", clip(raw), ErrNotHTTP)
	}
	if u.Hostname() == "" {
		return URL{}, fmt.Errorf("URL %q has no host", clip(raw))
	}
	if strings.HasSuffix(u.Hostname(), ".") {
		u.SetHostname(strings.TrimRight(u.Hostname(), "."))
	}
	u.SetUsername("")
	u.SetPassword("")
	q := u.Query()
	if q == "" {
		u.SetSearch("") // "http://a/?" and "http://a/" are one page
	}
	linked := u.Href(true)
	if sorted := sortQuery(q); sorted != q {
		u.SetSearch(sorted)
	}
	return URL{String: u.Href(true), AsLinked: linked, Scheme: scheme, Host: u.Host(), Hostname: u.Hostname(), parsed: u}, nil
}

// sortQuery orders "k=v" pairs by key, keeping each pair's bytes exactly as
// written: re-encoding the query (as URLSearchParams.sort does) would change
// what the server receives, "%20" into "+" for one.
func sortQuery(q string) string {
	pairs := strings.Split(q, "&")
	key := func(p string) string { k, _, _ := strings.Cut(p, "="); return k }
	if slices.IsSortedFunc(pairs, func(a, b string) int { return strings.Compare(key(a), key(b)) }) {
		return q
	}
	slices.SortStableFunc(pairs, func(a, b string) int { return strings.Compare(key(a), key(b)) })
	return strings.Join(pairs, "&")
}

func clip(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// ShardBy chooses what a URL's shard key is: the unit of routing and
// politeness.
type ShardBy string

const (
	// ShardByHost keys by authority (host and non-default port).
	ShardByHost ShardBy = "host"
	// ShardByDomain keys by registered domain (eTLD+1), so all of
	// a.example.com and b.example.com share a node and a politeness budget.
	ShardByDomain ShardBy = "domain"
)

// ShardKey returns u's shard key under mode; unknown modes key by host.
func ShardKey(u URL, mode ShardBy) string {
	if _, err := netip.ParseAddr(strings.Trim(u.Hostname, "[]")); mode == ShardByDomain && err != nil {
		if d, err := publicsuffix.EffectiveTLDPlusOne(u.Hostname); err == nil {
			return d
		}
	}
	return u.Host
}
