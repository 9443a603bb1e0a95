package campaign

import "time"

// Recrawl makes a campaign one run of a recurring crawl, its series: what
// earlier runs of the series saw of each URL is kept in Postgres (its
// validators, digest, links, when it was first seen, last changed and
// last fetched, how often it changed), and this run uses it:
//   - a URL is fetched with a conditional GET (If-None-Match,
//     If-Modified-Since); a 304 is recorded "not modified", with no body
//     downloaded, and the links of the last version are followed again;
//   - a URL is revisited only when due: each keeps a revisit interval that
//     adapts to how often it changed (Nutch's AdaptiveFetchSchedule: after
//     an unchanged fetch the interval grows by 40%, after a change it
//     shrinks by 20%, within MinInterval..MaxInterval); one not due is
//     recorded "not due" without a request, and its links followed again;
//   - a URL that answers 404 or 410 is recorded as gone, and is due at the
//     next run (its old links are never followed as not due).
//
// `spiderpool campaign schedule create` sets Series to the schedule's ID.
type Recrawl struct {
	// Series names the recurring crawl: runs with the same series share
	// what they saw. Letters, digits, '.', '_' and '-'.
	Series string `json:"series"`
	// MinInterval and MaxInterval bound a URL's revisit interval. A URL is
	// due at every run until it has been seen unchanged. Defaults 1h and
	// 720h (30 days).
	MinInterval Duration `json:"min_interval"`
	MaxInterval Duration `json:"max_interval"`
}

// Recrawl defaults.
const (
	DefaultRevisitMin = time.Hour
	DefaultRevisitMax = 30 * 24 * time.Hour
)

func (s *Spec) normalizeRecrawl(add func(error)) {
	if s.Recrawl == nil {
		return
	}
	r := new(Recrawl) // a copy: Normalize leaves its receiver's pointers alone
	*r = *s.Recrawl
	s.Recrawl = r
	if !validSeries(r.Series) {
		add(fieldErr("spec.recrawl.series", "want 1-200 letters, digits, '.', '_' or '-', got %q", r.Series))
	}
	defaultDuration(&r.MinInterval, DefaultRevisitMin)
	defaultDuration(&r.MaxInterval, DefaultRevisitMax)
	durationIn(add, "spec.recrawl.min_interval", r.MinInterval, time.Second, 10*365*24*time.Hour)
	durationIn(add, "spec.recrawl.max_interval", r.MaxInterval, r.MinInterval.D(), 10*365*24*time.Hour)
}

func validSeries(s string) bool {
	if len(s) == 0 || len(s) > 200 {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}
