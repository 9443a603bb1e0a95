package crawl

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/temoto/robotstxt"
)

// MaxRobotsBytes is how much of a robots.txt is read; RFC 9309 asks
// crawlers to parse at least 500 KiB.
const MaxRobotsBytes = 512 << 10

// Robots is one origin's robots.txt, judged by RFC 9309's rules on status:
// 2xx is parsed, 4xx (no file) allows everything, 5xx or no answer
// disallows everything until it is fetched again.
//
// Parsing is github.com/temoto/robotstxt, the parser Colly uses: user-agent
// groups with most-specific match, longest-path rule precedence, * and $
// wildcards, Crawl-delay and Sitemap lines. Lines it would reject the whole
// file for (a rule before any User-agent, an unreadable Crawl-delay) are
// dropped first, as RFC 9309 says to ignore what cannot be parsed.
type Robots struct {
	status int
	data   *robotstxt.RobotsData
}

// ParseRobots judges a robots.txt response. status 0 means the fetch got no
// response at all.
func ParseRobots(status int, body []byte) *Robots {
	if len(body) > MaxRobotsBytes {
		body = body[:MaxRobotsBytes]
	}
	r := &Robots{status: status}
	switch {
	case status >= 200 && status < 300:
		data, err := robotstxt.FromBytes(sanitizeRobots(body))
		if err != nil {
			data, _ = robotstxt.FromStatusAndBytes(404, nil) // unparseable: as if absent
		}
		r.data = data
	case status >= 400 && status < 500:
		r.data, _ = robotstxt.FromStatusAndBytes(status, nil)
	default: // 5xx, an unexpected status, or unreachable
		r.data, _ = robotstxt.FromStatusAndBytes(503, nil)
	}
	return r
}

// Unavailable is true when the file could not be had (5xx or no answer):
// the origin is off limits until it is fetched again.
func (r *Robots) Unavailable() bool {
	return !(r.status >= 200 && r.status < 300) && !(r.status >= 400 && r.status < 500)
}

// Status is the HTTP status the file was served with (0: no answer).
func (r *Robots) Status() int { return r.status }

// Allowed says whether agent (a product token such as "spiderpool") may
// fetch the URL's path and query.
func (r *Robots) Allowed(u URL, agent string) bool {
	target := u.Path()
	if i := strings.IndexByte(u.String, '?'); i >= 0 {
		target += u.String[i:]
	}
	return r.data.TestAgent(target, agent)
}

// CrawlDelay is the Crawl-delay of agent's group, 0 if none.
func (r *Robots) CrawlDelay(agent string) time.Duration {
	return r.data.FindGroup(agent).CrawlDelay
}

// Sitemaps lists the file's Sitemap lines.
func (r *Robots) Sitemaps() []string { return r.data.Sitemaps }

// AgentToken is the product token of a User-Agent header, lower case:
// "spiderpool/0.1 (+https://...)" gives "spiderpool". robots.txt groups are
// matched against it.
func AgentToken(userAgent string) string {
	tok := strings.TrimSpace(userAgent)
	if i := strings.IndexAny(tok, "/ ("); i >= 0 {
		tok = tok[:i]
	}
	if tok == "" {
		return "*"
	}
	return strings.ToLower(tok)
}

// sanitizeRobots drops lines the parser would fail the whole file on: rules
// before the first User-agent line, and Crawl-delay values that are not
// numbers.
func sanitizeRobots(body []byte) []byte {
	var out bytes.Buffer
	seenAgent := false
	for _, line := range bytes.Split(body, []byte("\n")) {
		content := line
		if i := bytes.IndexByte(content, '#'); i >= 0 {
			content = content[:i]
		}
		key, value, ok := bytes.Cut(content, []byte(":"))
		if ok {
			k := strings.ToLower(strings.TrimSpace(string(key)))
			v := strings.TrimSpace(string(value))
			switch k {
			case "user-agent", "useragent":
				seenAgent = true
			case "allow", "disallow":
				if !seenAgent {
					continue
				}
			case "crawl-delay", "crawldelay":
				if _, err := strconv.ParseFloat(v, 64); err != nil || !seenAgent {
					continue
				}
			}
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}
