package synthweb

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// SPARoot is where the single-page app lives, on the host it is mounted on.
const SPARoot = "/app/"

// SPA is a single-page app that shows nothing without JavaScript: every
// route (SPARoot, views, the feed, ...) serves the same empty shell, and
// one script builds the page. A crawl that does not run scripts finds the
// shell alone; one that renders finds:
//
//   - the home's navigation, links built by the router;
//   - each view's text and a link loaded by fetch() from a JSON API, and
//     lazy images below a tall spacer, loaded only once scrolled into view;
//   - a feed that loads 20 items at a time as it is scrolled, 200 in all
//     (bounded), each a link to an item page;
//   - a page whose script never ends (Spin);
//   - a page whose script requests Forbidden (Probe).
//
// Item and doc pages are plain HTML, for a crawl to fetch without a
// browser. Every request goes to the web's log, so a test counts each page
// and resource.
type SPA struct {
	Views     int    // views, each with a JSON document, a doc page and Images lazy images
	Images    int    // lazy images per view
	Items     int    // feed items, in pages of FeedPage
	Forbidden string // the URL Probe's script requests
	// NoTraps leaves Spin and Probe out of the home's links and of Pages:
	// a throughput bench would otherwise time a script that never ends.
	NoTraps bool
	// Articles, when > 0, adds server-rendered articles: plain HTML with
	// their text and links written by the server, and a script that only
	// enhances them (SPAEnhance). The docs link to the first, each to the
	// next. For spec.render.auto: no article is a script shell.
	Articles int
}

// FeedPage is how many items one feed request returns.
const FeedPage = 20

// NewSPA is the app of acceptance size: 5 views of 3 images, 200 items.
func NewSPA(forbidden string) *SPA {
	return &SPA{Views: 5, Images: 3, Items: 200, Forbidden: forbidden}
}

// The app's routes that a browser renders.
const (
	SPASpin  = SPARoot + "spin"
	SPAProbe = SPARoot + "probe"
	SPAFeed  = SPARoot + "feed"
	// SPAEnhance is the articles' script: requested only by a browser
	// that renders an article.
	SPAEnhance = SPARoot + "enhance.js"
)

// RenderPattern matches the app's script-built routes (for
// spec.render.include); items and docs are plain pages.
const RenderPattern = `/app/(view/[0-9]+|feed|spin|probe)?$`

// Site serves the app, to mount with Config.Custom.
func (s *SPA) Site() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{SPARoot: s.serve}
}

// Pages are the app's pages (paths): what a render crawl from SPARoot
// reaches, Spin included (it fails), unless NoTraps.
func (s *SPA) Pages() []string {
	out := []string{SPARoot, SPAFeed}
	if !s.NoTraps {
		out = append(out, SPASpin, SPAProbe)
	}
	for v := 1; v <= s.Views; v++ {
		out = append(out, s.view(v), s.doc(v))
	}
	for i := 1; i <= s.Items; i++ {
		out = append(out, s.item(i))
	}
	for a := 1; a <= s.Articles; a++ {
		out = append(out, s.article(a))
	}
	return out
}

// Resources are what the rendered pages request beyond themselves and the
// app's script, each once in a crawl that renders every page once: the
// views' JSON documents and images, the feed's pages.
func (s *SPA) Resources() []string {
	var out []string
	for v := 1; v <= s.Views; v++ {
		out = append(out, s.viewData(v))
		for j := 1; j <= s.Images; j++ {
			out = append(out, s.image(v, j))
		}
	}
	for p := range s.feedPages() {
		out = append(out, s.feedData(p))
	}
	return out
}

// ViewText is the text view v's JSON document gives it.
func ViewText(v int) string { return fmt.Sprintf("view %d, as loaded by fetch()", v) }

func (s *SPA) view(v int) string     { return SPARoot + "view/" + strconv.Itoa(v) }
func (s *SPA) doc(v int) string      { return SPARoot + "doc/" + strconv.Itoa(v) }
func (s *SPA) item(i int) string     { return SPARoot + "item/" + strconv.Itoa(i) }
func (s *SPA) viewData(v int) string { return SPARoot + "api/view/" + strconv.Itoa(v) + ".json" }
func (s *SPA) image(v, j int) string { return fmt.Sprintf("%simg/%d-%d.png", SPARoot, v, j) }
func (s *SPA) feedData(p int) string { return SPARoot + "api/feed?page=" + strconv.Itoa(p) }
func (s *SPA) feedPages() int        { return (s.Items + FeedPage - 1) / FeedPage }
func (s *SPA) script() string        { return SPARoot + "app.js" }
func (s *SPA) isView(rest string) bool {
	n, ok := number(rest, "view/")
	return ok && n >= 1 && n <= s.Views
}
func (s *SPA) isRoute(rest string) bool {
	return rest == "" || rest == "feed" || rest == "spin" || rest == "probe" || s.isView(rest)
}

// isPlain: an item or doc page, served as plain HTML.
func (s *SPA) isPlain(rest string) bool {
	if n, ok := number(rest, "item/"); ok {
		return n >= 1 && n <= s.Items
	}
	n, ok := number(rest, "doc/")
	return ok && n >= 1 && n <= s.Views
}

func number(rest, prefix string) (int, bool) {
	tail, ok := strings.CutPrefix(rest, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(tail)
	return n, err == nil
}

func (s *SPA) serve(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, SPARoot)
	switch {
	case s.isRoute(rest):
		writeHTML(w, `<!doctype html><html><head><meta charset="utf-8"><title>app</title></head>`+
			`<body><div id="root">Loading…</div><script src="`+s.script()+`"></script></body></html>`)
	case rest == "app.js":
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = fmt.Fprintf(w, appJS, s.Views, s.Images, strconv.Quote(s.Forbidden), !s.NoTraps)
	case strings.HasPrefix(rest, "api/view/"):
		v, ok := number(strings.TrimSuffix(rest, ".json"), "api/view/")
		if !ok || v < 1 || v > s.Views {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, map[string]string{"text": ViewText(v), "related": s.doc(v)})
	case rest == "api/feed":
		p, err := strconv.Atoi(r.URL.Query().Get("page"))
		if err != nil || p < 0 || p >= s.feedPages() {
			http.NotFound(w, r)
			return
		}
		type item struct{ Name, Href string }
		var items []item
		for i := p*FeedPage + 1; i <= min((p+1)*FeedPage, s.Items); i++ {
			items = append(items, item{fmt.Sprintf("item %d", i), s.item(i)})
		}
		writeJSON(w, map[string]any{"items": items, "end": p == s.feedPages()-1})
	case strings.HasPrefix(rest, "img/"):
		w.Header().Set("Content-Type", "image/svg+xml")
		_, _ = w.Write([]byte(`<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100"><rect width="100" height="100"/></svg>`))
	case s.isPlain(rest):
		writeHTML(w, `<!doctype html><html><head><title>`+rest+`</title></head><body><h1>`+rest+`</h1><a href="`+SPARoot+`">home</a>`+
			s.toArticles(rest)+`</body></html>`)
	case s.isArticle(rest):
		s.serveArticle(w, rest)
	case rest == "enhance.js":
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = w.Write([]byte(`document.documentElement.className += " enhanced";`))
	default:
		http.NotFound(w, r)
	}
}

func writeHTML(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(s))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// appJS is the app: a router over location.pathname. Arguments: views,
// images per view, the forbidden URL (quoted), whether the home links to
// the traps (spin, probe).
const appJS = `(function () {
  var VIEWS = %d, IMAGES = %d, FORBIDDEN = %s, TRAPS = %t;
  var root = document.getElementById('root');
  var path = location.pathname, m;
  root.textContent = '';
  function add(el) { root.appendChild(el); return el; }
  function link(href, text) {
    var a = document.createElement('a');
    a.href = href; a.textContent = text;
    a.addEventListener('click', function (e) { e.preventDefault(); history.pushState({}, '', href); });
    return a;
  }
  function text(t, cls) { var p = document.createElement('p'); p.className = cls; p.textContent = t; return add(p); }
  if (path === '/app/') {
    var nav = add(document.createElement('nav'));
    for (var i = 1; i <= VIEWS; i++) nav.appendChild(link('/app/view/' + i, 'view ' + i));
    nav.appendChild(link('/app/feed', 'feed'));
    if (TRAPS) {
      nav.appendChild(link('/app/spin', 'spin'));
      nav.appendChild(link('/app/probe', 'probe'));
    }
  } else if ((m = path.match(/^\/app\/view\/(\d+)$/))) {
    fetch('/app/api/view/' + m[1] + '.json').then(function (r) { return r.json(); }).then(function (d) {
      text(d.text, 'data');
      add(link(d.related, 'related'));
    });
    var spacer = add(document.createElement('div'));
    spacer.style.height = '4000px';
    // Lazy images: their source is set only once they are in view.
    var seen = new IntersectionObserver(function (es) {
      es.forEach(function (e) {
        if (e.isIntersecting) { e.target.src = e.target.dataset.src; seen.unobserve(e.target); }
      });
    });
    for (var j = 1; j <= IMAGES; j++) {
      var img = document.createElement('img');
      img.width = 100; img.height = 100;
      img.dataset.src = '/app/img/' + m[1] + '-' + j + '.png';
      seen.observe(add(img));
    }
  } else if (path === '/app/feed') {
    var list = add(document.createElement('ul')), next = 0, busy = false, done = false;
    var more = function () {
      if (busy || done) return;
      busy = true;
      fetch('/app/api/feed?page=' + next).then(function (r) { return r.json(); }).then(function (d) {
        d.items.forEach(function (it) {
          var li = document.createElement('li');
          li.style.height = '40px';
          li.appendChild(link(it.Href, it.Name));
          list.appendChild(li);
        });
        next++; done = d.end; busy = false;
      });
    };
    addEventListener('scroll', function () {
      if (innerHeight + scrollY >= document.documentElement.scrollHeight - 200) more();
    });
    more();
  } else if (path === '/app/spin') {
    for (;;) {}
  } else if (path === '/app/probe') {
    fetch(FORBIDDEN, { mode: 'no-cors' }).then(function () { text('reached', 'probe'); }, function () { text('refused', 'probe'); });
    add(link('/app/', 'home'));
  }
})();
`
