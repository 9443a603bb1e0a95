package crawl

import (
	"regexp"
	"strings"
)

// Scope decides which discovered URLs a campaign fetches. The zero value
// admits every http(s) URL at any depth.
type Scope struct {
	// Hosts admits URLs whose authority (host[:port]) is listed exactly.
	Hosts []string
	// Domains admits URLs whose hostname is a listed domain or a subdomain
	// of one. A URL is in scope if Hosts or Domains admits it; when both are
	// empty every host is.
	Domains []string
	// Include, when not empty, admits only URLs matching at least one.
	Include []*regexp.Regexp
	// Exclude rejects URLs matching any.
	Exclude []*regexp.Regexp
	// MaxDepth rejects URLs more than this many links from a seed; < 0 means
	// no limit.
	MaxDepth int
	// MaxURLLength rejects longer canonical URLs; 0 means no limit.
	MaxURLLength int
	// MaxPathRepeats rejects a path in which one segment appears more than
	// this many times (/a/b/a/b/a/b/...: a relative-link trap); 0 means no
	// limit.
	MaxPathRepeats int
}

// Verdict says why a URL is out of scope; the empty Verdict admits it.
type Verdict string

const (
	InScope        Verdict = ""
	OutOfScopeHost Verdict = "host not in scope"
	NotIncluded    Verdict = "matches no include pattern"
	Excluded       Verdict = "matches an exclude pattern"
	TooDeep        Verdict = "deeper than limits.max_depth"
	TooLong        Verdict = "longer than limits.max_url_length"
	RepeatedPath   Verdict = "a path segment repeats more than limits.max_path_repeats times"
)

// Recorded says whether a URL refused for this verdict is kept in the
// frontier as excluded, with the verdict as its reason. Trap verdicts are
// (the crawl stopped there and should say so); being off the scope's hosts
// or patterns is not, or every external link would be stored. TooDeep is
// about the path that found a URL, not the URL: a URL recorded for it is
// queued again if a link within limits.max_depth turns up later (see
// store.InsertURLs).
func (v Verdict) Recorded() bool {
	return v == TooDeep || v == TooLong || v == RepeatedPath
}

// Check returns InScope or the first rule u breaks at depth. Being off
// the scope's hosts comes first: an external link is never recorded, at
// any depth.
func (s *Scope) Check(u URL, depth int) Verdict {
	if !s.hostAllowed(u) {
		return OutOfScopeHost
	}
	if s.MaxDepth >= 0 && depth > s.MaxDepth {
		return TooDeep
	}
	if s.MaxURLLength > 0 && len(u.String) > s.MaxURLLength {
		return TooLong
	}
	if s.MaxPathRepeats > 0 && repeatsMoreThan(u.Path(), s.MaxPathRepeats) {
		return RepeatedPath
	}
	for _, re := range s.Exclude {
		if re.MatchString(u.String) {
			return Excluded
		}
	}
	if len(s.Include) > 0 {
		for _, re := range s.Include {
			if re.MatchString(u.String) {
				return InScope
			}
		}
		return NotIncluded
	}
	return InScope
}

// repeatsMoreThan reports whether some segment of path occurs more than n
// times.
func repeatsMoreThan(path string, n int) bool {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) <= n {
		return false
	}
	counts := make(map[string]int, len(segs))
	for _, s := range segs {
		if s == "" {
			continue
		}
		if counts[s]++; counts[s] > n {
			return true
		}
	}
	return false
}

func (s *Scope) hostAllowed(u URL) bool {
	if len(s.Hosts) == 0 && len(s.Domains) == 0 {
		return true
	}
	for _, h := range s.Hosts {
		if u.Host == h {
			return true
		}
	}
	for _, d := range s.Domains {
		if u.Hostname == d || strings.HasSuffix(u.Hostname, "."+d) {
			return true
		}
	}
	return false
}
