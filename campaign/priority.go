package campaign

import (
	"math"
	"regexp"
)

// PriorityRule gives the URLs matching Pattern a priority. Leasing takes a
// host's higher-priority pending URLs first, and shallower first within
// one priority (breadth-first); hosts take their turns whatever the
// priorities of their URLs, so a host of low-priority URLs still moves
// at its politeness pace and nobody starves.
type PriorityRule struct {
	Pattern  string `json:"pattern"`
	Priority int    `json:"priority"`
}

// MinPriority is the lowest priority a URL can have: sitemaps may rank a
// URL below the default 0 (see SitemapPriority).
const MinPriority = -1000

// Priorities is a spec's priority rules, compiled.
type Priorities struct {
	rules []compiledPriority
}

type compiledPriority struct {
	re       *regexp.Regexp
	priority int
}

// CompilePriorities compiles the spec's priority rules (Normalize has
// checked them), for admission.Compile, which ranks every URL admitted.
func (s Spec) CompilePriorities() (Priorities, error) {
	var p Priorities
	for _, r := range s.Scope.Priorities {
		re, err := regexp.Compile(r.Pattern)
		if err != nil {
			return Priorities{}, err
		}
		p.rules = append(p.rules, compiledPriority{re: re, priority: r.Priority})
	}
	return p, nil
}

// Of is url's priority: the highest of the rules it matches, or base (0,
// or what its sitemap says) when it matches none. A rule may rank below 0.
func (p Priorities) Of(url string, base int) int {
	best, matched := base, false
	for _, r := range p.rules {
		if (!matched || r.priority > best) && r.re.MatchString(url) {
			best, matched = r.priority, true
		}
	}
	return best
}

// SitemapPriority is the frontier priority of a sitemap's <priority>
// (0.0-1.0, default 0.5): 0 at 0.5, and 2 a tenth above or below it, so
// 1.0 is 10 and 0.0 is -10. A sitemap ranks its site's URLs among
// themselves, below what an operator adds with a priority.
func SitemapPriority(p float64) int {
	return int(math.Round((p - 0.5) * 20))
}
