package crawl

import (
	"strings"
)

// The fast path recognises URLs that are already in canonical form, which
// is almost every link a crawler meets, and skips the WHATWG parser for
// them (about a tenth of its cost, and no allocations but the result).
// Anything it is not sure of goes to the parser; FuzzFastPathAgrees checks
// that wherever the fast path answers, the parser answers the same.

// fastCanonical returns the canonical form of raw when raw is (after
// trimming and dropping a fragment) a plain absolute http(s) URL that the
// parser would leave as it is.
func fastCanonical(raw string) (URL, bool) {
	s := raw
	if i := strings.IndexByte(s, '#'); i >= 0 {
		s = s[:i]
	}
	var scheme, rest string
	switch {
	case strings.HasPrefix(s, "http://"):
		scheme, rest = "http", s[len("http://"):]
	case strings.HasPrefix(s, "https://"):
		scheme, rest = "https", s[len("https://"):]
	default:
		return URL{}, false
	}
	slash := strings.IndexByte(rest, '/')
	if slash <= 0 {
		return URL{}, false // no path ("http://h" gains a "/") or no host
	}
	host, pathQuery := rest[:slash], rest[slash:]
	hostname, ok := fastHost(host, scheme)
	if !ok {
		return URL{}, false
	}
	path, query, hasQuery := strings.Cut(pathQuery, "?")
	if !fastPath(path) {
		return URL{}, false
	}
	linked := s
	if hasQuery {
		if query == "" || !fastQuery(query) {
			return URL{}, false // an empty query is dropped by the slow path
		}
		if sorted := sortQuery(query); sorted != query {
			s = scheme + "://" + host + path + "?" + sorted
		}
	}
	return URL{String: s, AsLinked: linked, Scheme: scheme, Host: host, Hostname: hostname}, true
}

// fastHost accepts a lower-case DNS name or a canonical dotted-quad IPv4
// address, with an optional port that is not the scheme's default.
func fastHost(host, scheme string) (string, bool) {
	name, port, hasPort := strings.Cut(host, ":")
	if hasPort {
		if !canonicalPort(port) || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
			return "", false
		}
	}
	if name == "" || len(name) > 253 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return "", false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "", false
		}
	}
	// The WHATWG host parser reads a name whose last label is numeric as
	// an IPv4 address ("1.2.3", "0x7f.1" ...), and re-serialises it: only
	// canonical dotted quads pass here.
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last != "" && (isDigits(last) || strings.HasPrefix(last, "0x")) && !canonicalIPv4(name) {
		return "", false
	}
	if strings.HasPrefix(name, "xn--") || strings.Contains(name, ".xn--") {
		return "", false // IDNA validation is the parser's job
	}
	return name, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func canonicalPort(p string) bool {
	if !isDigits(p) || len(p) > 5 || (len(p) > 1 && p[0] == '0') {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

func canonicalIPv4(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if !isDigits(p) || len(p) > 3 || (len(p) > 1 && p[0] == '0') {
			return false
		}
		n := 0
		for i := 0; i < len(p); i++ {
			n = n*10 + int(p[i]-'0')
		}
		if n > 255 {
			return false
		}
	}
	return true
}

// pathOK are the bytes the WHATWG path state copies as they are.
var pathOK = byteSet("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&()*+,;=:@/")

// queryOK are the bytes the special-scheme query state copies as they are.
var queryOK = byteSet("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&()*+,;=:@/?")

func byteSet(s string) (set [256]bool) {
	for i := 0; i < len(s); i++ {
		set[s[i]] = true
	}
	return set
}

// fastPath accepts a path with no dot segments (plain or percent-encoded),
// no backslashes and only bytes copied verbatim or valid %XX escapes.
func fastPath(p string) bool {
	if p == "" || p[0] != '/' || !escapesOK(p, &pathOK) {
		return false
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "." || seg == ".." || strings.Contains(seg, "%2e") || strings.Contains(seg, "%2E") {
			return false
		}
	}
	return true
}

func fastQuery(q string) bool { return escapesOK(q, &queryOK) }

// escapesOK checks every byte is in ok or starts a %XX escape.
func escapesOK(s string, ok *[256]bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
			continue
		}
		if !ok[c] {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// fastResolve joins the common forms of link to a canonical base, so the
// fast path can judge the result: absolute, scheme-relative, root-relative,
// query-only and plain relative references without dot segments.
func fastResolve(base URL, ref string) (string, bool) {
	if ref == "" {
		return "", false
	}
	switch {
	case strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://"):
		return ref, true
	case strings.HasPrefix(ref, "//"):
		return base.Scheme + ":" + ref, true
	case ref[0] == '/':
		return base.Scheme + "://" + base.Host + ref, true
	case ref[0] == '?':
		path, _, _ := strings.Cut(base.String[len(base.Scheme)+3+len(base.Host):], "?")
		return base.Scheme + "://" + base.Host + path + ref, true
	case ref[0] == '#':
		return base.String, true
	}
	// A relative path: no scheme (a colon before any slash means one) and
	// nothing the parser treats specially at its start.
	if i := strings.IndexAny(ref, ":/?#\\"); i >= 0 && ref[i] == ':' || ref[0] == '.' || strings.ContainsRune(ref, '\\') {
		return "", false
	}
	path, _, _ := strings.Cut(base.String[len(base.Scheme)+3+len(base.Host):], "?")
	dir := path[:strings.LastIndexByte(path, '/')+1]
	return base.Scheme + "://" + base.Host + dir + ref, true
}
