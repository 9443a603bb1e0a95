// Package docs holds the repository's Markdown to one rule: every link
// resolves. A relative link names a file or folder of the repository (not
// one outside it, not one in bin/ or node_modules/), an #anchor names a
// heading of the Markdown file it points into, by GitHub's rule for
// heading IDs, and a link that leaves the repository goes to a public
// site. Nothing is fetched: links to other sites are checked for their
// form only.
//
// The parser reads the subset of CommonMark the repository writes: inline
// links and images, reference definitions, ATX headings, fenced code
// blocks and code spans (whose text is not markup), and HTML id, name,
// href and src attributes.
package docs

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// A Link is a link destination in a Markdown file, and its line (from 1).
type Link struct {
	Dest string
	Line int
}

// Document is what a Markdown file holds for the link check.
type Document struct {
	Links   []Link
	Anchors map[string]bool // the IDs a link's #fragment may name
}

var (
	fenceOpen = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	heading   = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// inlineLink is [text](dest "title") or ![alt](dest): the text may
	// hold one level of brackets and run over lines, the destination is
	// <anything> or has no spaces and only balanced parentheses.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*(<[^>\n]*>|\S+)`)
	htmlLink   = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:href|src)\s*=\s*"([^"]*)"`)
	htmlAnchor = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:id|name)\s*=\s*"([^"]*)"`)
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	emphasis   = regexp.MustCompile(`\*+|(?:^|\W)_+|_+(?:\W|$)`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
)

// Parse reads a Markdown document's links and anchors.
func Parse(src string) Document {
	text := blankCode(src)
	doc := Document{Anchors: map[string]bool{}}
	seen := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			doc.Anchors[uniqueSlug(Slug(m[1]), seen)] = true
		}
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(text, -1) {
		doc.Anchors[m[1]] = true
	}
	lineAt := lineIndex(text)
	for _, re := range []*regexp.Regexp{inlineLink, refDef, htmlLink} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			dest := strings.TrimSuffix(strings.TrimPrefix(text[m[2]:m[3]], "<"), ">")
			doc.Links = append(doc.Links, Link{Dest: dest, Line: lineAt(m[2])})
		}
	}
	return doc
}

// blankCode replaces the text of fenced code blocks and code spans with
// spaces, keeping every newline, so that what looks like markup inside
// them is not read as such and line numbers still count. A heading's
// code span keeps its text: the heading's ID is made from it.
func blankCode(src string) string {
	lines := strings.Split(src, "\n")
	var fence string
	for i, line := range lines {
		if fence != "" {
			if t := strings.TrimSpace(line); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			fence = m[1]
			lines[i] = ""
		}
	}
	out := []byte(strings.Join(lines, "\n"))
	for i := 0; i < len(out); {
		if out[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(out) && out[i+n] == '`' {
			n++
		}
		end := closingRun(out, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		if !inHeading(out, i) {
			for j := i + n; j < end; j++ {
				if out[j] != '\n' {
					out[j] = ' '
				}
			}
		}
		i = end + n
	}
	return string(out)
}

// closingRun finds the next run of exactly n backticks from i, or -1.
func closingRun(b []byte, i, n int) int {
	for i < len(b) {
		if b[i] != '`' {
			i++
			continue
		}
		run := 0
		for i+run < len(b) && b[i+run] == '`' {
			run++
		}
		if run == n {
			return i
		}
		i += run
	}
	return -1
}

// inHeading says whether offset i is on an ATX heading's line.
func inHeading(b []byte, i int) bool {
	start := i
	for start > 0 && b[start-1] != '\n' {
		start--
	}
	end := i
	for end < len(b) && b[end] != '\n' {
		end++
	}
	return heading.Match(b[start:end])
}

// lineIndex maps an offset in text to its line number, from 1.
func lineIndex(text string) func(int) int {
	var starts []int
	for i, c := range text {
		if c == '\n' {
			starts = append(starts, i)
		}
	}
	return func(off int) int {
		n := 1
		for _, s := range starts {
			if s >= off {
				break
			}
			n++
		}
		return n
	}
}

// Slug is the ID GitHub gives a heading of this Markdown text: its text
// as rendered (no code ticks, emphasis or link syntax), lower-cased, with
// every character but letters, digits, '_', '-' and spaces dropped and
// each space made a '-'.
func Slug(heading string) string {
	text := inlineLink.ReplaceAllStringFunc(heading, func(l string) string {
		return l[strings.Index(l, "[")+1 : strings.LastIndex(l, "](")]
	})
	text = inlineCode.ReplaceAllStringFunc(text, func(c string) string { return strings.Trim(c, "`") })
	text = htmlTag.ReplaceAllString(text, "")
	text = emphasis.ReplaceAllStringFunc(text, func(e string) string { return strings.Trim(e, "*_") })
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// uniqueSlug numbers a slug seen before, as GitHub does: "setup",
// "setup-1", "setup-2".
func uniqueSlug(slug string, seen map[string]int) string {
	n, dup := seen[slug]
	seen[slug] = n + 1
	if !dup {
		return slug
	}
	return slug + "-" + strconv.Itoa(n)
}

// publicHost says whether a link to host leaves for a public site, not
// this machine or a private network.
func publicHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" || h == "localhost" || strings.HasSuffix(h, ".localhost") || strings.HasSuffix(h, ".local") ||
		strings.HasSuffix(h, ".internal") || !strings.Contains(h, ".") && net.ParseIP(h) == nil {
		return false
	}
	if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
		return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsLinkLocalUnicast())
	}
	return true
}
