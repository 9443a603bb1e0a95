package crawl

import (
	"slices"
	"strings"
)

// Page requisites are what a page needs to render: its images, stylesheets,
// scripts and fonts — Heritrix's embed hops, wget's -p. They are not links
// (a crawl that follows no links still wants them) and yield no links of
// their own, except a stylesheet's url() and @import, which are requisites
// again.

// requisiteRels are <link rel> values whose href is a requisite (not
// prefetch: that is for the next page, often an HTML one).
var requisiteRels = []string{"stylesheet", "icon", "apple-touch-icon", "preload", "modulepreload"}

// openSearch is the type of an OpenSearch description, which a <link
// rel=search> names as a requisite (wget -p fetches it); a rel=search to
// an HTML search page is not one.
const openSearch = "application/opensearchdescription+xml"

// isRequisiteLink says whether a <link rel=... type=...> names a
// requisite.
func isRequisiteLink(rel, typ string) bool {
	for _, t := range strings.Fields(strings.ToLower(rel)) {
		if slices.Contains(requisiteRels, t) || t == "search" && strings.EqualFold(strings.TrimSpace(typ), openSearch) {
			return true
		}
	}
	return false
}

// Srcset returns the URLs of an img or source srcset attribute, by the
// HTML standard's parsing of image candidate strings: a URL (which may
// hold commas, but not end with one) then descriptors up to a comma
// outside parentheses.
func Srcset(s string) []string {
	var out []string
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }
	i := 0
	for i < len(s) {
		for i < len(s) && (isSpace(s[i]) || s[i] == ',') {
			i++
		}
		start := i
		for i < len(s) && !isSpace(s[i]) {
			i++
		}
		url := s[start:i]
		if trimmed := strings.TrimRight(url, ","); trimmed != url {
			// A URL ending in commas has no descriptors.
			if trimmed != "" {
				out = append(out, trimmed)
			}
			continue
		}
		if url != "" {
			out = append(out, url)
		}
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '(':
				depth++
			case ')':
				if depth > 0 {
					depth--
				}
			case ',':
				if depth == 0 {
					i++
					goto next
				}
			}
			i++
		}
	next:
	}
	return out
}

// CSSURLs returns the URLs a stylesheet (or a style attribute, or a
// <style> element) refers to: every url(...) and every @import "...", in
// order, at most max of them (0: no limit). Comments are skipped; strings
// other than an @import's are not URLs. It never fails: broken CSS yields
// what it can, as browsers read it.
func CSSURLs(css []byte, max int) []string {
	var out []string
	add := func(u string) bool {
		u = strings.TrimSpace(unescapeCSS(u))
		if u != "" && !strings.HasPrefix(strings.ToLower(u), "data:") {
			out = append(out, u)
		}
		return max <= 0 || len(out) < max
	}
	s := string(css)
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '/' && strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '"' || c == '\'':
			_, n := cssString(s[i:])
			i += n
		case c == '@' && hasPrefixFold(s[i:], "@import"):
			i += len("@import")
			for i < len(s) && isCSSSpace(s[i]) {
				i++
			}
			if i < len(s) && (s[i] == '"' || s[i] == '\'') {
				str, n := cssString(s[i:])
				i += n
				if !add(str) {
					return out
				}
			}
		case (c == 'u' || c == 'U') && hasPrefixFold(s[i:], "url(") && (i == 0 || !isNameChar(s[i-1])):
			i += len("url(")
			for i < len(s) && isCSSSpace(s[i]) {
				i++
			}
			var u string
			if i < len(s) && (s[i] == '"' || s[i] == '\'') {
				str, n := cssString(s[i:])
				u, i = str, i+n
			} else {
				start := i
				for i < len(s) && s[i] != ')' {
					if s[i] == '\\' {
						i++
					}
					i++
				}
				u = s[start:min(i, len(s))]
			}
			if end := strings.IndexByte(s[min(i, len(s)):], ')'); end >= 0 {
				i += end + 1
			} else {
				i = len(s)
			}
			if !add(u) {
				return out
			}
		default:
			i++
		}
	}
	return out
}

// cssString reads a quoted string at the start of s: its value (escapes
// kept for unescapeCSS) and the bytes it took, quotes included. An
// unterminated string ends at a newline or the end.
func cssString(s string) (string, int) {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			return s[1:i], i + 1
		case '\n':
			return s[1:i], i
		}
	}
	return s[1:], len(s)
}

// unescapeCSS undoes CSS escapes: a backslash and a character stands for
// the character, a backslash and up to six hex digits (and one optional
// space) for that code point, a backslash before a newline for nothing.
func unescapeCSS(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		j := i
		for j < len(s) && j-i < 6 && isHex(s[j]) {
			j++
		}
		if j == i {
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		var r rune
		for _, h := range s[i:j] {
			r = r*16 + rune(hexVal(byte(h)))
		}
		if r == 0 || r > 0x10FFFF || r >= 0xD800 && r <= 0xDFFF {
			r = '\uFFFD'
		}
		b.WriteRune(r)
		i = j - 1
		if j < len(s) && isCSSSpace(s[j]) {
			i = j
		}
	}
	return b.String()
}

func hexVal(c byte) int {
	switch {
	case c >= 'a':
		return int(c-'a') + 10
	case c >= 'A':
		return int(c-'A') + 10
	}
	return int(c - '0')
}

func isCSSSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

func isNameChar(c byte) bool {
	return c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
