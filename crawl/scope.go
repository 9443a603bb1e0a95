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
}

// Verdict says why a URL is out of scope; the empty Verdict admits it.
type Verdict string

const (
	InScope        Verdict = ""
	OutOfScopeHost Verdict = "host not in scope"
	NotIncluded    Verdict = "matches no include pattern"
	Excluded       Verdict = "matches an exclude pattern"
	TooDeep        Verdict = "deeper than max_depth"
	TooLong        Verdict = "longer than max_url_length"
)

// Check returns InScope or the first rule u breaks at depth.
func (s *Scope) Check(u URL, depth int) Verdict {
	if s.MaxDepth >= 0 && depth > s.MaxDepth {
		return TooDeep
	}
	if s.MaxURLLength > 0 && len(u.String) > s.MaxURLLength {
		return TooLong
	}
	if !s.hostAllowed(u) {
		return OutOfScopeHost
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
