package crawl

import (
	"strings"
	"testing"
)

// The cases below are the test cases of Google's reference robots.txt
// parser (repository google/robotstxt, file robots_test.cc), the parser
// behind RFC 9309, translated one assertion to one row. Each row is named
// after the C++ test it comes from. The ID_* tests check the protocol
// itself and every one of them must hold. The GoogleOnly_* tests check
// Google's own extensions: the rows we agree with hold as written; where an
// extension would allow what RFC 9309 disallows, the row states the RFC's
// answer and names Google's in differs.

// robotsCase is one decision: may agent fetch url under robots?
type robotsCase struct {
	test   string // the robots_test.cc test it comes from
	robots string
	agent  string
	url    string
	want   bool
	// differs, when set, says why we answer unlike Google's parser, which
	// answers !want.
	differs string
}

// requestTarget is what a crawler requests for url: its path and query,
// without the fragment ("" and a bare host are "/"). The cases name whole
// URLs; Robots takes the request-target.
func requestTarget(url string) string {
	rest := url
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
		if j := strings.IndexAny(rest, "/?"); j >= 0 {
			rest = rest[j:]
		} else {
			rest = ""
		}
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	return rest
}

func robotsCases() []robotsCase {
	var cs []robotsCase
	add := func(test, robots, agent, url string, want bool) {
		cs = append(cs, robotsCase{test: test, robots: robots, agent: agent, url: url, want: want})
	}
	differ := func(test, robots, agent, url string, want bool, why string) {
		cs = append(cs, robotsCase{test: test, robots: robots, agent: agent, url: url, want: want, differs: why})
	}

	// GoogleOnly_SystemTest
	{
		const robots = "user-agent: FooBot\ndisallow: /\n"
		add("GoogleOnly_SystemTest", "", "FooBot", "", true)      // empty robots.txt: everything allowed
		add("GoogleOnly_SystemTest", robots, "", "", true)        // empty agent matches no group
		add("GoogleOnly_SystemTest", robots, "FooBot", "", false) // empty URL is "/"
		add("GoogleOnly_SystemTest", "", "", "", true)            // all empty
	}

	// ID_LineSyntax_Line: name: value lines; a missing colon between two
	// words is read as one ("disallow /").
	{
		const url = "http://foo.bar/x/y"
		add("ID_LineSyntax_Line", "user-agent: FooBot\ndisallow: /\n", "FooBot", url, false)
		add("ID_LineSyntax_Line", "foo: FooBot\nbar: /\n", "FooBot", url, true)
		add("ID_LineSyntax_Line", "user-agent FooBot\ndisallow /\n", "FooBot", url, false)
	}

	// ID_LineSyntax_Groups: groups end at a user-agent line after rules;
	// groups for one agent combine; rules outside groups are ignored.
	{
		const robots = "allow: /foo/bar/\n" +
			"\n" +
			"user-agent: FooBot\n" +
			"disallow: /\n" +
			"allow: /x/\n" +
			"user-agent: BarBot\n" +
			"disallow: /\n" +
			"allow: /y/\n" +
			"\n" +
			"\n" +
			"allow: /w/\n" +
			"user-agent: BazBot\n" +
			"\n" +
			"user-agent: FooBot\n" +
			"allow: /z/\n" +
			"disallow: /\n"
		const (
			w   = "http://foo.bar/w/a"
			x   = "http://foo.bar/x/b"
			y   = "http://foo.bar/y/c"
			z   = "http://foo.bar/z/d"
			foo = "http://foo.bar/foo/bar/"
		)
		add("ID_LineSyntax_Groups", robots, "FooBot", x, true)
		add("ID_LineSyntax_Groups", robots, "FooBot", z, true)
		add("ID_LineSyntax_Groups", robots, "FooBot", y, false)
		add("ID_LineSyntax_Groups", robots, "BarBot", y, true)
		add("ID_LineSyntax_Groups", robots, "BarBot", w, true)
		add("ID_LineSyntax_Groups", robots, "BarBot", z, false)
		add("ID_LineSyntax_Groups", robots, "BazBot", z, true)
		add("ID_LineSyntax_Groups", robots, "FooBot", foo, false)
		add("ID_LineSyntax_Groups", robots, "BarBot", foo, false)
		add("ID_LineSyntax_Groups", robots, "BazBot", foo, false)
	}

	// ID_LineSyntax_Groups_OtherRules: lines other than rules do not
	// close a group.
	{
		const url = "http://foo.bar/"
		sitemap := "User-agent: BarBot\nSitemap: https://foo.bar/sitemap\nUser-agent: *\nDisallow: /\n"
		add("ID_LineSyntax_Groups_OtherRules", sitemap, "FooBot", url, false)
		add("ID_LineSyntax_Groups_OtherRules", sitemap, "BarBot", url, false)
		unknown := "User-agent: FooBot\nInvalid-Unknown-Line: unknown\nUser-agent: *\nDisallow: /\n"
		add("ID_LineSyntax_Groups_OtherRules", unknown, "FooBot", url, false)
		add("ID_LineSyntax_Groups_OtherRules", unknown, "BarBot", url, false)
	}

	// ID_REPLineNamesCaseInsensitive
	{
		const allowed, disallowed = "http://foo.bar/x/y", "http://foo.bar/a/b"
		for _, robots := range []string{
			"USER-AGENT: FooBot\nALLOW: /x/\nDISALLOW: /\n",
			"user-agent: FooBot\nallow: /x/\ndisallow: /\n",
			"uSeR-aGeNt: FooBot\nAlLoW: /x/\ndIsAlLoW: /\n",
		} {
			add("ID_REPLineNamesCaseInsensitive", robots, "FooBot", allowed, true)
			add("ID_REPLineNamesCaseInsensitive", robots, "FooBot", disallowed, false)
		}
	}

	// ID_UserAgentValueCaseInsensitive
	{
		const allowed, disallowed = "http://foo.bar/x/y", "http://foo.bar/a/b"
		for _, robots := range []string{
			"User-Agent: FOO BAR\nAllow: /x/\nDisallow: /\n",
			"User-Agent: foo bar\nAllow: /x/\nDisallow: /\n",
			"User-Agent: FoO bAr\nAllow: /x/\nDisallow: /\n",
		} {
			for _, agent := range []string{"Foo", "foo"} {
				add("ID_UserAgentValueCaseInsensitive", robots, agent, allowed, true)
				add("ID_UserAgentValueCaseInsensitive", robots, agent, disallowed, false)
			}
		}
	}

	// GoogleOnly_AcceptUserAgentUpToFirstSpace: "Foo Bar" is read as the
	// token "Foo"; an agent "Foo Bar" is no token and gets the * group.
	{
		const robots = "User-Agent: *\nDisallow: /\nUser-Agent: Foo Bar\nAllow: /x/\nDisallow: /\n"
		add("GoogleOnly_AcceptUserAgentUpToFirstSpace", robots, "Foo", "http://foo.bar/x/y", true)
		add("GoogleOnly_AcceptUserAgentUpToFirstSpace", robots, "Foo Bar", "http://foo.bar/x/y", false)
	}

	// ID_GlobalGroups_Secondary: the * group applies only when no group
	// names the agent; no group at all allows everything.
	{
		const url = "http://foo.bar/x/y"
		global := "user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n"
		onlySpecific := "user-agent: FooBot\nallow: /\nuser-agent: BarBot\ndisallow: /\nuser-agent: BazBot\ndisallow: /\n"
		add("ID_GlobalGroups_Secondary", "", "FooBot", url, true)
		add("ID_GlobalGroups_Secondary", global, "FooBot", url, false)
		add("ID_GlobalGroups_Secondary", global, "BarBot", url, true)
		add("ID_GlobalGroups_Secondary", onlySpecific, "QuxBot", url, true)
	}

	// ID_AllowDisallow_Value_CaseSensitive
	add("ID_AllowDisallow_Value_CaseSensitive", "user-agent: FooBot\ndisallow: /x/\n", "FooBot", "http://foo.bar/x/y", false)
	add("ID_AllowDisallow_Value_CaseSensitive", "user-agent: FooBot\ndisallow: /X/\n", "FooBot", "http://foo.bar/x/y", true)

	// ID_LongestMatch: the rule with the most octets wins; a tie goes to
	// allow.
	{
		const url = "http://foo.bar/x/page.html"
		const test = "ID_LongestMatch"
		add(test, "user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/\n", "FooBot", url, false)
		add(test, "user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot", url, true)
		add(test, "user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot", "http://foo.bar/x/", false)
		add(test, "user-agent: FooBot\ndisallow: \nallow: \n", "FooBot", url, true)
		add(test, "user-agent: FooBot\ndisallow: /\nallow: /\n", "FooBot", url, true)
		add(test, "user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot", "http://foo.bar/x", false)
		add(test, "user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot", "http://foo.bar/x/", true)
		add(test, "user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/page.html\n", "FooBot", url, true)
		add(test, "user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot", "http://foo.bar/page.html", false)
		add(test, "user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot", "http://foo.bar/page", true)
		add(test, "user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "FooBot", url, true)
		add(test, "user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "FooBot", "http://foo.bar/x/y.html", false)
		specific := "User-agent: *\nDisallow: /x/\nUser-agent: FooBot\nDisallow: /y/\n"
		add(test, specific, "FooBot", "http://foo.bar/x/page", true)
		add(test, specific, "FooBot", "http://foo.bar/y/page", false)
	}

	// ID_Encoding: rules are percent-encoded as URLs are before they are
	// compared; the URL is the caller's to encode.
	{
		const test = "ID_Encoding"
		add(test, "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n",
			"FooBot", "http://foo.bar/foo/bar?qux=taz&baz=http://foo.bar?tar&par", true)
		raw := "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/ツ\n"
		add(test, raw, "FooBot", "http://foo.bar/foo/bar/%E3%83%84", true)
		add(test, raw, "FooBot", "http://foo.bar/foo/bar/ツ", false)
		encoded := "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%E3%83%84\n"
		add(test, encoded, "FooBot", "http://foo.bar/foo/bar/%E3%83%84", true)
		add(test, encoded, "FooBot", "http://foo.bar/foo/bar/ツ", false)
		unreserved := "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%62%61%7A\n"
		add(test, unreserved, "FooBot", "http://foo.bar/foo/bar/baz", false)
		add(test, unreserved, "FooBot", "http://foo.bar/foo/bar/%62%61%7A", true)
	}

	// ID_SpecialCharacters: # starts a comment, $ ends a pattern, *
	// matches any run of octets.
	{
		const test = "ID_SpecialCharacters"
		star := "User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n"
		add(test, star, "FooBot", "http://foo.bar/foo/bar/quz", false)
		add(test, star, "FooBot", "http://foo.bar/foo/quz", true)
		add(test, star, "FooBot", "http://foo.bar/foo//quz", true)
		add(test, star, "FooBot", "http://foo.bar/foo/bax/quz", true)
		dollar := "User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n"
		add(test, dollar, "FooBot", "http://foo.bar/foo/bar", false)
		add(test, dollar, "FooBot", "http://foo.bar/foo/bar/qux", true)
		add(test, dollar, "FooBot", "http://foo.bar/foo/bar/", true)
		add(test, dollar, "FooBot", "http://foo.bar/foo/bar/baz", true)
		comment := "User-agent: FooBot\n# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n"
		add(test, comment, "FooBot", "http://foo.bar/foo/bar", true)
		add(test, comment, "FooBot", "http://foo.bar/foo/quz", false)
	}

	// GoogleOnly_IndexHTMLisDirectory: Google reads "Allow: /d/index.html"
	// as allowing "/d/" too. RFC 9309 compares the rule's octets and no
	// more, and the file disallows "/d/": we keep to the RFC.
	{
		const test = "GoogleOnly_IndexHTMLisDirectory"
		robots := "User-Agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n"
		differ(test, robots, "foobot", "http://foo.com/allowed-slash/", false,
			"Google takes index.html to stand for its directory; RFC 9309 does not, and the file disallows /")
		add(test, robots, "foobot", "http://foo.com/allowed-slash/index.htm", false)
		add(test, robots, "foobot", "http://foo.com/allowed-slash/index.html", true)
		add(test, robots, "foobot", "http://foo.com/anyother-url", false)
	}

	// GoogleOnly_LineTooLong: Google cuts a line at 8*2083 octets, so a
	// cut rule matches URLs the whole rule does not. RFC 9309 asks for the
	// file to be parsed (at least 500 KiB) and sets no line limit; a cut
	// Allow would allow what the file disallows. We read whole lines.
	{
		const test = "GoogleOnly_LineTooLong"
		const maxLine = 8 * 2083
		long := func(prefix, fill, directive string) string {
			line := prefix
			for len(line) < maxLine-len(prefix)-len(directive)+1 {
				line += fill
			}
			return line
		}
		aaa := long("/x/", "a", "disallow: ")
		robots := "user-agent: FooBot\ndisallow: " + aaa + "/qux\n"
		add(test, robots, "FooBot", "http://foo.bar/fux", true)
		differ(test, robots, "FooBot", "http://foo.bar"+aaa+"/fux", true,
			"Google matches the rule cut before /qux; the whole rule does not match /fux")
		lineA, lineB := long("/x/", "a", "allow: "), long("/x/", "b", "allow: ")
		robots = "user-agent: FooBot\ndisallow: /\nallow: " + lineA + "/qux\nallow: " + lineB + "/qux\n"
		add(test, robots, "FooBot", "http://foo.bar/", false)
		add(test, robots, "FooBot", "http://foo.bar"+lineA+"/qux", true)
		differ(test, robots, "FooBot", "http://foo.bar"+lineB+"/fux", false,
			"Google matches the Allow cut before /qux; the whole rule does not match /fux, which Disallow: / covers")
	}

	// GoogleOnly_DocumentationChecks: the examples of Google's robots.txt
	// documentation.
	{
		const test = "GoogleOnly_DocumentationChecks"
		fish := "user-agent: FooBot\ndisallow: /\nallow: /fish\n"
		fishStar := "user-agent: FooBot\ndisallow: /\nallow: /fish*\n"
		for _, robots := range []string{fish, fishStar} {
			add(test, robots, "FooBot", "http://foo.bar/bar", false)
			add(test, robots, "FooBot", "http://foo.bar/fish", true)
			add(test, robots, "FooBot", "http://foo.bar/fish.html", true)
			add(test, robots, "FooBot", "http://foo.bar/fish/salmon.html", true)
			add(test, robots, "FooBot", "http://foo.bar/fishheads", true)
			add(test, robots, "FooBot", "http://foo.bar/fishheads/yummy.html", true)
			add(test, robots, "FooBot", "http://foo.bar/fish.html?id=anything", true)
			add(test, robots, "FooBot", "http://foo.bar/catfish", false)
			add(test, robots, "FooBot", "http://foo.bar/?id=fish", false)
		}
		add(test, fish, "FooBot", "http://foo.bar/Fish.asp", false)
		add(test, fishStar, "FooBot", "http://foo.bar/Fish.bar", false)

		dir := "user-agent: FooBot\ndisallow: /\nallow: /fish/\n"
		add(test, dir, "FooBot", "http://foo.bar/bar", false)
		add(test, dir, "FooBot", "http://foo.bar/fish/", true)
		add(test, dir, "FooBot", "http://foo.bar/fish/salmon", true)
		add(test, dir, "FooBot", "http://foo.bar/fish/?salmon", true)
		add(test, dir, "FooBot", "http://foo.bar/fish/salmon.html", true)
		add(test, dir, "FooBot", "http://foo.bar/fish/?id=anything", true)
		add(test, dir, "FooBot", "http://foo.bar/fish", false)
		add(test, dir, "FooBot", "http://foo.bar/fish.html", false)
		add(test, dir, "FooBot", "http://foo.bar/Fish/Salmon.html", false)

		php := "user-agent: FooBot\ndisallow: /\nallow: /*.php\n"
		add(test, php, "FooBot", "http://foo.bar/bar", false)
		add(test, php, "FooBot", "http://foo.bar/filename.php", true)
		add(test, php, "FooBot", "http://foo.bar/folder/filename.php", true)
		add(test, php, "FooBot", "http://foo.bar/folder/filename.php?parameters", true)
		add(test, php, "FooBot", "http://foo.bar//folder/any.php.file.html", true)
		add(test, php, "FooBot", "http://foo.bar/filename.php/", true)
		add(test, php, "FooBot", "http://foo.bar/index?f=filename.php/", true)
		add(test, php, "FooBot", "http://foo.bar/php/", false)
		add(test, php, "FooBot", "http://foo.bar/index?php", false)
		add(test, php, "FooBot", "http://foo.bar/windows.PHP", false)

		phpEnd := "user-agent: FooBot\ndisallow: /\nallow: /*.php$\n"
		add(test, phpEnd, "FooBot", "http://foo.bar/bar", false)
		add(test, phpEnd, "FooBot", "http://foo.bar/filename.php", true)
		add(test, phpEnd, "FooBot", "http://foo.bar/folder/filename.php", true)
		add(test, phpEnd, "FooBot", "http://foo.bar/filename.php?parameters", false)
		add(test, phpEnd, "FooBot", "http://foo.bar/filename.php/", false)
		add(test, phpEnd, "FooBot", "http://foo.bar/filename.php5", false)
		add(test, phpEnd, "FooBot", "http://foo.bar/php/", false)
		add(test, phpEnd, "FooBot", "http://foo.bar/filename?php", false)
		add(test, phpEnd, "FooBot", "http://foo.bar/aaaphpaaa", false)
		add(test, phpEnd, "FooBot", "http://foo.bar//windows.PHP", false)

		fishPHP := "user-agent: FooBot\ndisallow: /\nallow: /fish*.php\n"
		add(test, fishPHP, "FooBot", "http://foo.bar/bar", false)
		add(test, fishPHP, "FooBot", "http://foo.bar/fish.php", true)
		add(test, fishPHP, "FooBot", "http://foo.bar/fishheads/catfish.php?parameters", true)
		add(test, fishPHP, "FooBot", "http://foo.bar/Fish.PHP", false)

		add(test, "user-agent: FooBot\nallow: /p\ndisallow: /\n", "FooBot", "http://example.com/page", true)
		add(test, "user-agent: FooBot\nallow: /folder\ndisallow: /folder\n", "FooBot", "http://example.com/folder/page", true)
		add(test, "user-agent: FooBot\nallow: /page\ndisallow: /*.htm\n", "FooBot", "http://example.com/page.htm", false)
		add(test, "user-agent: FooBot\nallow: /$\ndisallow: /\n", "FooBot", "http://example.com/", true)
		add(test, "user-agent: FooBot\nallow: /$\ndisallow: /\n", "FooBot", "http://example.com/page.html", false)
	}

	// ID_LinesNumbersAreCountedCorrectly, ID_UTF8ByteOrderMarkIsSkipped:
	// robots_test.cc counts the directives the parser reports
	// (TestRobotsLineSyntax below does too); these rows check the same
	// files by their decisions.
	{
		const test = "ID_LinesNumbersAreCountedCorrectly"
		for _, robots := range lineEndingFiles {
			add(test, robots.body, "foo", "http://foo.bar/some/path", true)
			add(test, robots.body, "foo", "http://foo.bar/other", true)
			add(test, robots.body, "bar", "http://foo.bar/some/path", false)
		}
	}
	{
		const test = "ID_UTF8ByteOrderMarkIsSkipped"
		for _, f := range bomFiles {
			add(test, strings.Replace(f.body, "Allow: /AnyValue", "Disallow: /AnyValue", 1), "foo",
				"http://foo.bar/AnyValue", !f.ruleRead)
		}
	}
	return cs
}

// lineEndingFiles are ID_LinesNumbersAreCountedCorrectly's files: one
// content with LF, CRLF, CR, no final newline and mixed endings; each has
// 4 directives, the last on line 6.
var lineEndingFiles = []struct{ name, body string }{
	{"unix", "User-Agent: foo\nAllow: /some/path\nUser-Agent: bar\n\n\nDisallow: /\n"},
	{"dos", "User-Agent: foo\r\nAllow: /some/path\r\nUser-Agent: bar\r\n\r\n\r\nDisallow: /\r\n"},
	{"mac", "User-Agent: foo\rAllow: /some/path\rUser-Agent: bar\r\r\rDisallow: /\r"},
	{"no final newline", "User-Agent: foo\nAllow: /some/path\nUser-Agent: bar\n\n\nDisallow: /"},
	{"mixed", "User-Agent: foo\nAllow: /some/path\r\nUser-Agent: bar\n\r\n\nDisallow: /"},
}

// bomFiles are ID_UTF8ByteOrderMarkIsSkipped's files: a whole or partial
// UTF-8 byte-order mark is skipped at the start of the file only.
var bomFiles = []struct {
	name                string
	body                string
	directives, unknown int
	ruleRead            bool // the Allow line applies to foo
}{
	{"full BOM", "\xEF\xBB\xBFUser-Agent: foo\nAllow: /AnyValue\n", 2, 0, true},
	{"two bytes of a BOM", "\xEF\xBBUser-Agent: foo\nAllow: /AnyValue\n", 2, 0, true},
	{"one byte of a BOM", "\xEFUser-Agent: foo\nAllow: /AnyValue\n", 2, 0, true},
	{"broken BOM", "\xEF\x11\xBFUser-Agent: foo\nAllow: /AnyValue\n", 1, 1, false},
	{"BOM mid-file", "User-Agent: foo\n\xEF\xBB\xBFAllow: /AnyValue\n", 1, 1, false},
}

func TestRobotsConformance(t *testing.T) {
	for _, c := range robotsCases() {
		t.Run(c.test, func(t *testing.T) {
			r := ParseRobots(200, []byte(c.robots))
			if got := r.allowedTarget(requestTarget(c.url), c.agent); got != c.want {
				t.Errorf("agent %q, URL %.80q: allowed=%v, want %v\nrobots.txt (first 300 bytes):\n%.300s", c.agent, c.url, got, c.want, c.robots)
			}
		})
	}
}

// TestRobotsLineSyntax is robots_test.cc's counting tests: which lines the
// parser reads as directives, on which line numbers, and the Sitemap value
// (ID_LinesNumbersAreCountedCorrectly, ID_UTF8ByteOrderMarkIsSkipped,
// ID_NonStandardLineExample_Sitemap).
func TestRobotsLineSyntax(t *testing.T) {
	type stats struct{ directives, unknown, lastLine int }
	count := func(body string) stats {
		var s stats
		scanRobots([]byte(body), func(line int, key robotsKey, _ string) {
			if key == keyUnknown {
				s.unknown++
			} else {
				s.directives++
			}
			s.lastLine = line
		})
		return s
	}
	for _, f := range lineEndingFiles {
		t.Run("ID_LinesNumbersAreCountedCorrectly/"+f.name, func(t *testing.T) {
			if got := count(f.body); got.directives != 4 || got.lastLine != 6 {
				t.Errorf("%q: %d directives, last on line %d; want 4, line 6", f.body, got.directives, got.lastLine)
			}
		})
	}
	for _, f := range bomFiles {
		t.Run("ID_UTF8ByteOrderMarkIsSkipped/"+f.name, func(t *testing.T) {
			if got := count(f.body); got.directives != f.directives || got.unknown != f.unknown {
				t.Errorf("%q: %d directives, %d unknown; want %d, %d", f.body, got.directives, got.unknown, f.directives, f.unknown)
			}
		})
	}
	const sitemap = "http://foo.bar/sitemap.xml"
	groups := "User-Agent: foo\nAllow: /some/path\nUser-Agent: bar\n\n\n"
	for name, body := range map[string]string{
		"at the end":   groups + "Sitemap: " + sitemap + "\n",
		"at the start": "Sitemap: " + sitemap + "\n" + groups,
	} {
		t.Run("ID_NonStandardLineExample_Sitemap/"+name, func(t *testing.T) {
			if got := ParseRobots(200, []byte(body)).Sitemaps(); len(got) != 1 || got[0] != sitemap {
				t.Errorf("sitemaps %q, want [%q]", got, sitemap)
			}
		})
	}
}

// TestValidAgentToken is ID_VerifyValidUserAgentsToObey: the agent a
// crawler obeys robots.txt under is a product token.
func TestValidAgentToken(t *testing.T) {
	for token, want := range map[string]bool{
		"Foobot": true, "Foobot-Bar": true, "Foo_Bar": true,
		"": false, "ツ": false, "Foobot*": false, " Foobot ": false, "Foobot/2.1": false, "Foobot Bar": false,
	} {
		if got := ValidAgentToken(token); got != want {
			t.Errorf("ValidAgentToken(%q) = %v, want %v", token, got, want)
		}
	}
}
