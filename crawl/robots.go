package crawl

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxRobotsBytes is how much of a robots.txt is read; RFC 9309 asks
// crawlers to parse at least 500 KiB.
const MaxRobotsBytes = 512 << 10

// Robots is one origin's robots.txt, judged by RFC 9309's rules on status:
// 2xx is parsed, 4xx (no file) allows everything, 5xx or no answer
// disallows everything until it is fetched again.
//
// The parser is our own, written to RFC 9309 and checked against the
// protocol tests of Google's reference parser (robots_conformance_test.go).
// Why not a library: temoto/robotstxt, which we used before, fails 9 of
// their 92 ID_* assertions (ties, octet length of wildcard rules, non-ASCII
// rules, comments, BOM) and drops the whole file for one bad line;
// jimsmart/grobotstxt, a port of Google's parser, is not served by the
// module proxy we build from, has no Crawl-delay, parses the file again
// for every URL it is asked about, and carries Google's extensions that
// allow what RFC 9309 disallows (index.html standing for its directory,
// lines cut after 16664 octets). How a file is read:
//   - lines end at LF, CRLF or CR; a UTF-8 byte-order mark (or part of
//     one) at the start is skipped; # starts a comment;
//   - a line is "name: value", or "name value" when the colon is missing
//     between exactly two words; any other line is ignored, never the file;
//   - a group is one or more User-agent lines and the rules after them; a
//     User-agent line after a rule starts the next group, other lines
//     (Sitemap, Crawl-delay, unknown names) do not; rules before the first
//     User-agent line belong to no group;
//   - an agent obeys the groups whose User-agent token equals its own
//     (case-insensitive; the token is the value up to its first character
//     outside letters, digits, '-' and '_', so "spider" never applies to
//     "spiderpool"), combined; if none names it, the * groups; if there are
//     none, nothing is disallowed;
//   - of the rules that match the request-target, the longest (in octets,
//     as percent-encoded) wins, and a tie goes to Allow.
type Robots struct {
	status   int
	groups   []robotsGroup
	sitemaps []string
}

// robotsGroup is one group of a robots.txt file.
type robotsGroup struct {
	agents     []string // lower-case tokens, "*" for all; "" for a value that has none
	rules      []robotsRule
	crawlDelay time.Duration
}

// robotsRule is one Allow or Disallow line.
type robotsRule struct {
	allow bool
	// octets is the pattern's length as percent-encoded, '*' and '$'
	// included: a rule's weight against the others that match.
	octets int
	// segments are the pattern split at '*': the first must start the
	// target, the others follow in order.
	segments []string
	// anchored is a pattern ending in '$': the last segment must end the
	// target.
	anchored bool
}

// ParseRobots judges a robots.txt response. status 0 means the fetch got no
// response at all.
func ParseRobots(status int, body []byte) *Robots {
	r := &Robots{status: status}
	if status < 200 || status >= 300 {
		return r
	}
	if len(body) > MaxRobotsBytes {
		// A line cut in two is dropped whole: the part of an Allow line
		// would allow more than the line does.
		whole := body[MaxRobotsBytes] == '\n' || body[MaxRobotsBytes] == '\r'
		body = body[:MaxRobotsBytes]
		if !whole {
			body = body[:bytes.LastIndexAny(body, "\r\n")+1]
		}
	}
	group := -1      // index of the group being read, -1 before the first
	inRules := false // a rule has been read since the group's last User-agent line
	scanRobots(body, func(_ int, key robotsKey, value string) {
		switch key {
		case keyUserAgent:
			if group < 0 || inRules {
				r.groups = append(r.groups, robotsGroup{})
				group, inRules = len(r.groups)-1, false
			}
			r.groups[group].agents = append(r.groups[group].agents, agentOfLine(value))
		case keyAllow, keyDisallow:
			if group < 0 {
				return
			}
			inRules = true
			// An empty pattern matches nothing: "Disallow:" has always
			// meant "nothing is disallowed".
			if value != "" {
				r.groups[group].rules = append(r.groups[group].rules, newRobotsRule(key == keyAllow, value))
			}
		case keyCrawlDelay:
			if d, ok := parseCrawlDelay(value); ok && group >= 0 {
				r.groups[group].crawlDelay = max(r.groups[group].crawlDelay, d)
			}
		case keySitemap:
			if value != "" {
				r.sitemaps = append(r.sitemaps, value)
			}
		}
	})
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
// fetch u, judged on u's request target as it is sent (u.Target(): the
// path and the query in the order it was linked), never its canonical
// form. The query is part of it: "Disallow: /p?b=" covers "/p?b=1&a=2" and
// not "/p?a=2&b=1". The one way to ask.
func (r *Robots) Allowed(u URL, agent string) bool {
	return r.allowedTarget(u.Target(), agent)
}

// allowedTarget is Allowed on a request target: the path and query
// exactly as the request line sends them, percent-encoded, without the
// fragment ("" is "/").
func (r *Robots) allowedTarget(target, agent string) bool {
	switch {
	case r.status >= 400 && r.status < 500:
		return true
	case r.status < 200 || r.status >= 300:
		return false
	}
	if target == "" {
		target = "/"
	}
	if target == "/robots.txt" { // RFC 9309 2.2.2: implicitly allowed
		return true
	}
	target = upperEscapes(target)
	allow, disallow := -1, -1 // octets of the longest matching rule of each kind
	for _, g := range r.groupsFor(agent) {
		for _, rule := range g.rules {
			if !rule.matches(target) {
				continue
			}
			if rule.allow {
				allow = max(allow, rule.octets)
			} else {
				disallow = max(disallow, rule.octets)
			}
		}
	}
	return disallow < 0 || allow >= disallow
}

// CrawlDelay is the Crawl-delay of agent's groups (the longest, if they
// give several), 0 if none.
func (r *Robots) CrawlDelay(agent string) time.Duration {
	var d time.Duration
	for _, g := range r.groupsFor(agent) {
		d = max(d, g.crawlDelay)
	}
	return d
}

// Sitemaps lists the file's Sitemap lines.
func (r *Robots) Sitemaps() []string { return r.sitemaps }

// groupsFor is the groups agent obeys: those naming it, else those for *.
func (r *Robots) groupsFor(agent string) []*robotsGroup {
	var named, global []*robotsGroup
	token := strings.ToLower(agent)
	valid := ValidAgentToken(agent)
	for i := range r.groups {
		g := &r.groups[i]
		switch {
		case valid && slices.Contains(g.agents, token):
			named = append(named, g)
		case slices.Contains(g.agents, "*"):
			global = append(global, g)
		}
	}
	if len(named) > 0 {
		return named
	}
	return global
}

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

// ValidAgentToken says whether s can name a crawler in robots.txt: one or
// more letters, '-' or '_' (RFC 9309's product token), or digits, which the
// RFC leaves out but crawler names carry.
func ValidAgentToken(s string) bool {
	return s != "" && tokenPrefix(s) == len(s)
}

// tokenPrefix is the length of the product token s starts with.
func tokenPrefix(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return i
		}
	}
	return len(s)
}

// agentOfLine is the agent a User-agent line names: "*", or the lower-case
// token its value starts with ("FooBot/1.0" and "FooBot Images" name
// foobot). A value that starts with no token names no agent.
func agentOfLine(value string) string {
	if value == "*" || strings.HasPrefix(value, "*") && isRobotsSpace(value[1]) {
		return "*"
	}
	return strings.ToLower(value[:tokenPrefix(value)])
}

// parseCrawlDelay reads a Crawl-delay value in seconds. A value that is not
// a finite, non-negative number is ignored, as a line that cannot be
// parsed is.
func parseCrawlDelay(value string) (time.Duration, bool) {
	secs, err := strconv.ParseFloat(value, 64)
	if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || secs < 0 {
		return 0, false
	}
	if secs >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(secs * float64(time.Second)), true
}

// newRobotsRule percent-encodes pattern as a URL's serialiser would and
// splits it at its wildcards.
func newRobotsRule(allow bool, pattern string) robotsRule {
	pattern = encodePattern(pattern)
	rule := robotsRule{allow: allow, octets: len(pattern)}
	if strings.HasSuffix(pattern, "$") {
		rule.anchored, pattern = true, pattern[:len(pattern)-1]
	}
	rule.segments = strings.Split(pattern, "*")
	return rule
}

// matches says whether the rule's pattern matches target from its start.
// Taking each segment at its first place after the one before is enough:
// an earlier place never leaves less room for the segments after it.
func (rule robotsRule) matches(target string) bool {
	segs := rule.segments
	if !strings.HasPrefix(target, segs[0]) {
		return false
	}
	if len(segs) == 1 {
		return !rule.anchored || len(target) == len(segs[0])
	}
	pos := len(segs[0])
	last := len(segs) - 1
	for _, seg := range segs[1:last] {
		i := strings.Index(target[pos:], seg)
		if i < 0 {
			return false
		}
		pos += i + len(seg)
	}
	if rule.anchored {
		return len(target)-len(segs[last]) >= pos && strings.HasSuffix(target, segs[last])
	}
	return strings.Contains(target[pos:], segs[last])
}

// encodePattern writes a rule's path the way URLs are serialised, so that
// the two compare octet for octet (RFC 9309 2.2.2): octets outside ASCII,
// controls, space and the characters a URL never carries raw ('"', '<',
// '>') are percent-encoded, and existing escapes get upper-case hex.
func encodePattern(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]):
			b.WriteByte('%')
			b.WriteByte(upperHex(p[i+1]))
			b.WriteByte(upperHex(p[i+2]))
			i += 2
		case c <= ' ' || c >= 0x7f || c == '"' || c == '<' || c == '>':
			const hex = "0123456789ABCDEF"
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// upperEscapes gives a target's percent-escapes upper-case hex, as the
// rules have: "%e3" and "%E3" are the same octet.
func upperEscapes(target string) string {
	for i := 0; i+2 < len(target); i++ {
		if target[i] == '%' && (isLowerHex(target[i+1]) || isLowerHex(target[i+2])) {
			b := []byte(target)
			for j := i; j+2 < len(b); j++ {
				if b[j] == '%' && isHex(b[j+1]) && isHex(b[j+2]) {
					b[j+1], b[j+2] = upperHex(b[j+1]), upperHex(b[j+2])
					j += 2
				}
			}
			return string(b)
		}
	}
	return target
}

func isLowerHex(c byte) bool { return 'a' <= c && c <= 'f' }
func upperHex(c byte) byte {
	if isLowerHex(c) {
		return c - 'a' + 'A'
	}
	return c
}

// robotsKey is what a robots.txt line says.
type robotsKey int

const (
	keyUnknown robotsKey = iota
	keyUserAgent
	keyAllow
	keyDisallow
	keyCrawlDelay
	keySitemap
)

// robotsKeys names each key as written, in lower case, with the spellings
// that are common enough to be meant (Google's parser reads the same).
var robotsKeys = map[string]robotsKey{
	"user-agent": keyUserAgent, "useragent": keyUserAgent, "user agent": keyUserAgent,
	"allow":    keyAllow,
	"disallow": keyDisallow, "dissallow": keyDisallow, "dissalow": keyDisallow, "disalow": keyDisallow,
	"diasllow": keyDisallow, "disallaw": keyDisallow,
	"crawl-delay": keyCrawlDelay, "crawldelay": keyCrawlDelay,
	"sitemap": keySitemap, "site-map": keySitemap,
}

// utf8BOM is the UTF-8 byte-order mark.
const utf8BOM = "\xEF\xBB\xBF"

// scanRobots reads body line by line and calls emit with the 1-based line
// number, key and value of every line that has the form of a directive.
// Lines without that form (blank, comments, garbage) are skipped; a line
// never stops the scan.
func scanRobots(body []byte, emit func(line int, key robotsKey, value string)) {
	// A BOM, or the start of one, is skipped at the start of the file only.
	for i := 0; i < len(utf8BOM) && i < len(body) && body[0] == utf8BOM[i]; i++ {
		body = body[1:]
	}
	for n := 1; len(body) > 0; n++ {
		var line []byte
		if i := bytes.IndexAny(body, "\r\n"); i < 0 {
			line, body = body, nil
		} else {
			line = body[:i]
			if body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n' {
				i++
			}
			body = body[i+1:]
		}
		if name, value, ok := splitRobotsLine(line); ok {
			emit(n, robotsKeys[strings.ToLower(name)], value)
		}
	}
}

// splitRobotsLine reads "name: value # comment". Without a colon, a line
// of exactly two words is read as name and value ("Disallow /x"), as
// people write it by mistake; anything else is not a directive.
func splitRobotsLine(line []byte) (name, value string, ok bool) {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	s := trimRobotsSpace(string(line))
	if i := strings.IndexByte(s, ':'); i >= 0 {
		name, value = trimRobotsSpace(s[:i]), trimRobotsSpace(s[i+1:])
		return name, value, name != ""
	}
	i := strings.IndexAny(s, " \t\v\f")
	if i < 0 {
		return "", "", false
	}
	name, value = s[:i], trimRobotsSpace(s[i:])
	if strings.ContainsAny(value, " \t\v\f") {
		return "", "", false
	}
	return name, value, true
}

func isRobotsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n'
}

func trimRobotsSpace(s string) string {
	for len(s) > 0 && isRobotsSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isRobotsSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}
