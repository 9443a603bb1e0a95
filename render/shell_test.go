package render

import (
	"strings"
	"testing"
)

func TestIsScriptShell(t *testing.T) {
	long := strings.Repeat("Server-rendered words a reader sees. ", 4) // 128 characters, spaces not counted
	for _, c := range []struct {
		name  string
		doc   string
		shell bool
	}{
		{"create-react-app: empty root, a noscript, a script", `<!doctype html><html><head><title>App</title><script defer src="/static/js/main.js"></script></head>
<body><noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div></body></html>`, true},
		{"a placeholder text and a module script", `<html><body><div id="mount">Loading…</div><script type="module" src="/app.js"></script></body></html>`, true},
		{"Angular: an empty custom element", `<html><head><base href="/"></head><body><app-root></app-root><script src="main.js" type="module"></script></body></html>`, true},
		{"a server-rendered header and footer around an empty #app", `<html><body><header>` + long + `</header><div id="app"></div><footer>` + long + `</footer><script src="/app.js"></script></body></html>`, true},
		{"a mount holding only a placeholder text", `<html><body><p>` + long + `</p><div id="root">Loading…</div><script src="/app.js"></script></body></html>`, true},
		{"text in style, template and script is not read", `<html><head><style>body{}` + long + `</style></head><body><template>` + long + `</template><script>var s = "` + long + `";</script></body></html>`, true},
		{"a text under 100 characters", `<html><body><h1>Hello</h1><p>` + strings.Repeat("x", 93) + `</p><script>1</script></body></html>`, true},

		{"a text of 100 characters, spaces not counted", `<html><body><h1>Hello</h1>   <p>` + strings.Repeat("x", 95) + `</p><script>1</script></body></html>`, false},
		{"a plain page: little text, no script", `<html><body><h1>item/3</h1><a href="/app/">home</a></body></html>`, false},
		{"only data blocks are no scripts", `<html><body><div id="root"></div><script type="application/ld+json">{}</script><script type="application/json">{}</script></body></html>`, false},
		{"a server-rendered page with a script", `<html><body><article><h1>Title</h1><p>` + long + `</p></article><script src="/analytics.js"></script></body></html>`, false},
		{"Next.js, server-rendered: #__next holds the page", `<html><body><div id="__next"><main><p>` + long + `</p></main></div><script id="__NEXT_DATA__" type="application/json">{}</script><script src="/_next/main.js"></script></body></html>`, false},
		{"an empty document", ``, false},
		{"not HTML at all, but bytes", "\x00\x01\x02", false},
	} {
		if got := IsScriptShell([]byte(c.doc)); got != c.shell {
			t.Errorf("%s: IsScriptShell = %v, want %v", c.name, got, c.shell)
		}
	}
}
