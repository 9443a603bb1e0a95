package render

import (
	"bytes"
	"slices"
	"strings"
	"unicode"

	nethtml "golang.org/x/net/html" // the package's tests have an html of their own
	"golang.org/x/net/html/atom"
)

// ShellTextBelow is the body text, in characters other than spaces, under
// which a document with a script is a script shell (IsScriptShell).
const ShellTextBelow = 100

// mountIDs are the ids of the elements the common client-side frameworks
// build their page into: React's (create-react-app, Vite) root, Vue's
// app, Next.js's __next, Nuxt's __nuxt, Gatsby's ___gatsby.
var mountIDs = []string{"root", "app", "__next", "__nuxt", "___gatsby"}

// IsScriptShell says whether doc, an HTML document as served, is a script
// shell: a page whose content its scripts build, which a plain fetch sees
// empty (spec.render.auto renders only those). The rule: doc has at least
// one script (a <script> whose type is none, a JavaScript type or
// "module"; data blocks such as application/ld+json are no scripts), and
// either
//
//   - its body has fewer than ShellTextBelow characters of text, spaces
//     not counted, outside script, style, noscript and template elements;
//     or
//   - it has a mount element (id root, app, __next, __nuxt or ___gatsby)
//     with no element inside: a framework's page not rendered by the
//     server, whatever text (a "Loading…") or server-rendered header and
//     footer it has around it.
//
// It errs toward rendering: a short page with a script (a 404 page, say)
// renders for nothing, which costs a tab, not content. The two clauses
// are the "thin content" and "empty hydration root" signals of
// StormCrawler's JsRenderingDetector (apache/stormcrawler#1898), without
// its framework fingerprints: a framework's name in a page says nothing
// of whether the server rendered it.
func IsScriptShell(doc []byte) bool {
	root, err := nethtml.Parse(bytes.NewReader(doc))
	if err != nil {
		return false
	}
	var s shellSigns
	s.walk(root, false)
	return s.scripts > 0 && (s.bodyText < ShellTextBelow || s.emptyMount)
}

// shellSigns are what IsScriptShell reads of a document.
type shellSigns struct {
	scripts    int
	bodyText   int // characters other than spaces
	emptyMount bool
}

func (s *shellSigns) walk(n *nethtml.Node, inBody bool) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		switch c.Type {
		case nethtml.TextNode:
			if inBody {
				s.bodyText += nonSpace(c.Data)
			}
		case nethtml.ElementNode:
			switch c.DataAtom {
			case atom.Script:
				if isScriptType(attr(c, "type")) {
					s.scripts++
				}
				continue
			case atom.Style, atom.Noscript, atom.Template:
				continue
			}
			if inBody && slices.Contains(mountIDs, attr(c, "id")) && !hasElement(c) {
				s.emptyMount = true
			}
			s.walk(c, inBody || c.DataAtom == atom.Body)
		}
	}
}

// isScriptType says whether a <script type=t> runs (a classic script or
// a module), as opposed to a data block.
func isScriptType(t string) bool {
	t = strings.ToLower(strings.TrimSpace(t))
	return t == "" || t == "module" || strings.Contains(t, "javascript") || strings.Contains(t, "ecmascript")
}

func hasElement(n *nethtml.Node) bool {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == nethtml.ElementNode {
			return true
		}
	}
	return false
}

func attr(n *nethtml.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

func nonSpace(s string) int {
	n := 0
	for _, r := range s {
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n
}
