package crawl

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzRobotsGarbageLine inserts one line into a robots.txt and checks that
// a line that is no rule cannot loosen the file: a line the parser cannot
// read changes nothing at all (no decision, Crawl-delay or Sitemap); a
// Sitemap or Crawl-delay line changes no decision (and a Crawl-delay that
// is no finite, non-negative number not the delay either); an Allow or
// Disallow line before the first User-agent line changes no decision.
// Whether a line is a directive is decided here from RFC 9309's syntax,
// not by asking the parser.
//
// at picks the place (a line start) and the inserted line's ending (LF,
// CRLF or CR).
func FuzzRobotsGarbageLine(f *testing.F) {
	disallowing := []string{
		"User-agent: *\nDisallow: /\n",
		"User-agent: spiderpool\nDisallow: /private\nAllow: /private/ok\n\nUser-agent: *\nDisallow: /\n",
		"\xEF\xBB\xBFUser-agent: *\r\nDisallow: /p?b=\r\nCrawl-delay: 2\r\n",
		"Disallow: /x\rUser-agent: *\rDisallow: /private\r",
		"User-agent: a\rDisallow: /a\r\nUser-agent: *\nDisallow: /*.pdf$\r",
		"Sitemap: http://h/s.xml\nUser-agent: spiderpool\nUser-agent: other\nDisallow: /\n",
		"\xEFUser-agent: *\nDisallow: /",
	}
	garbage := []string{
		"Crawl-delay: -1", "Crawl-delay: NaN", "Crawl-delay: inf", "Crawl-delay: 1.5", "crawl-delay: 1e400",
		"this is no directive", ":", "Disallow /x /y", "\xff\xfe\x00", "<html>", "Sitemap: http://h/other.xml",
		"Allow: /", "Disallow: /x", "# Allow: /", "\xEF\xBB\xBFAllow: /", "\xBB\xBFUser-agent: x", "Noindex: /",
		"Allow /", "User-agent: spiderpool",
	}
	for i, body := range disallowing {
		for j, g := range garbage {
			f.Add(body, g, uint16(i*7+j), "/private/x?b=1", "spiderpool")
		}
	}
	f.Fuzz(func(t *testing.T, body, line string, at uint16, target, agent string) {
		line = strings.Map(func(r rune) rune {
			if r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, line)
		bom := bomPrefix(body)
		starts := lineStarts(body, bom)
		p := starts[int(at)%len(starts)]
		ending := []string{"\n", "\r\n", "\r"}[int(at>>8)%3]
		var mutated string
		if p == len(body) && p > bom && !strings.HasSuffix(body, "\n") && !strings.HasSuffix(body, "\r") {
			mutated = body + ending + line
		} else {
			mutated = body[:p] + line + ending + body[p:]
		}
		if len(mutated) > MaxRobotsBytes {
			return
		}
		// At the start of the file the line may begin, or complete, a
		// byte-order mark, which is skipped: judge what is left.
		effective := line
		if p == bom {
			if n := bomPrefix(body[:bom]+line) - bom; n > 0 {
				effective = line[n:]
			}
		}
		name, value, directive := directiveOf(effective)
		beforeFirstGroup := !slices.ContainsFunc(splitLines(body[bom:p]), func(l string) bool {
			n, _, ok := directiveOf(l)
			return ok && slices.Contains(userAgentNames, n)
		})
		samePolicy, sameDelay, sameSitemaps := true, true, true
		switch {
		case !directive:
		case slices.Contains(sitemapNames, name):
			sameSitemaps = false
		case slices.Contains(crawlDelayNames, name):
			secs, err := strconv.ParseFloat(value, 64)
			sameDelay = err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || secs < 0
		case slices.Contains(ruleNames, name) && beforeFirstGroup:
		default: // a rule or User-agent line in the groups may change anything
			return
		}

		was, is := ParseRobots(200, []byte(body)), ParseRobots(200, []byte(mutated))
		for _, a := range []string{agent, "spiderpool", "*"} {
			before, after := was.allowedTarget(target, a), is.allowedTarget(target, a)
			if samePolicy && before != after {
				t.Fatalf("inserting %q (as %q) turned %q for %q from allowed=%v to %v\nbefore: %q\nafter:  %q",
					line, effective, target, a, before, after, body, mutated)
			}
			if sameDelay && was.CrawlDelay(a) != is.CrawlDelay(a) {
				t.Fatalf("inserting %q changed %q's crawl delay from %v to %v\nbefore: %q\nafter:  %q",
					line, a, was.CrawlDelay(a), is.CrawlDelay(a), body, mutated)
			}
		}
		if sameSitemaps && !slices.Equal(was.Sitemaps(), is.Sitemaps()) {
			t.Fatalf("inserting %q changed the sitemaps from %q to %q", line, was.Sitemaps(), is.Sitemaps())
		}
	})
}

// The directive names, as RFC 9309 and the crawler's extensions write them
// (with the misspellings read as meant), lower case.
var (
	userAgentNames  = []string{"user-agent", "useragent", "user agent"}
	ruleNames       = []string{"allow", "disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"}
	crawlDelayNames = []string{"crawl-delay", "crawldelay"}
	sitemapNames    = []string{"sitemap", "site-map"}
)

// directiveOf reads a line as RFC 9309 writes a directive, "name: value
// # comment", or "name value" (two words, the colon forgotten), and says
// whether the name is one the crawler knows.
func directiveOf(line string) (name, value string, ok bool) {
	const space = " \t\v\f"
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	line = strings.Trim(line, space)
	if i := strings.IndexByte(line, ':'); i >= 0 {
		name, value = strings.Trim(line[:i], space), strings.Trim(line[i+1:], space)
	} else {
		words := strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(space, r) })
		if len(words) != 2 {
			return "", "", false
		}
		name, value = words[0], words[1]
	}
	name = strings.ToLower(name)
	for _, names := range [][]string{userAgentNames, ruleNames, crawlDelayNames, sitemapNames} {
		if slices.Contains(names, name) {
			return name, value, true
		}
	}
	return "", "", false
}

// bomPrefix is how many of s's first bytes begin a UTF-8 byte-order mark.
func bomPrefix(s string) int {
	n := 0
	for n < len(utf8BOM) && n < len(s) && s[n] == utf8BOM[n] {
		n++
	}
	return n
}

// lineStarts lists the offsets at which a line of body starts, from the
// first after the byte-order mark, and len(body).
func lineStarts(body string, from int) []int {
	starts := []int{from}
	for i := from; i < len(body); i++ {
		switch {
		case body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n':
			continue
		case body[i] == '\r' || body[i] == '\n':
			starts = append(starts, i+1)
		}
	}
	if starts[len(starts)-1] != len(body) {
		starts = append(starts, len(body))
	}
	return starts
}

// splitLines splits s at LF, CRLF and CR.
func splitLines(s string) []string {
	return strings.FieldsFunc(strings.ReplaceAll(s, "\r\n", "\n"), func(r rune) bool { return r == '\r' || r == '\n' })
}
