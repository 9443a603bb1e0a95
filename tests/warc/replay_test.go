package warc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// pngOf is a real PNG of w×h pixels: a browser decodes it and reports its
// size, which proves the bytes replayed are the image.
func pngOf(w, h int) string {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{uint8(x * 20), uint8(y * 20), 200, 255})
		}
	}
	var b bytes.Buffer
	png.Encode(&b, img)
	return b.String()
}

// replaySite is a page whose look depends on its requisites: an @imported
// stylesheet colours its heading, another sets a background image, and two
// images (one by srcset) have sizes a browser can measure.
func replaySite() *countingSite {
	return &countingSite{hits: map[string]int{}, files: map[string]file{
		"/": {"text/html", `<!doctype html><html><head><title>archived home</title>
<link rel="stylesheet" href="/css/site.css"></head>
<body><h1>Archived</h1><img id="logo" src="/img/logo.png"><img id="hi" srcset="/img/hi.png 1x">
<div id="bg"></div></body></html>`},
		"/css/site.css": {"text/css", `@import "base.css";
#bg { width: 11px; height: 11px; background-image: url(../img/bg.png) }`},
		"/css/base.css": {"text/css", `h1 { color: rgb(1, 2, 3) }`},
		"/img/logo.png": {"image/png", pngOf(7, 5)},
		"/img/hi.png":   {"image/png", pngOf(9, 9)},
		"/img/bg.png":   {"image/png", pngOf(11, 11)},
	}}
}

// replayed is what replay.mjs reports of the page ReplayWeb.page shows.
type replayed struct {
	Frame  string `json:"frame"`
	Title  string `json:"title"`
	Images []struct {
		ID            string `json:"id"`
		Src           string `json:"src"`
		Width, Height int
	} `json:"images"`
	H1Color   string `json:"h1Color"`
	BgImage   string `json:"bgImage"`
	Resources []struct {
		Name   string `json:"name"`
		Status int    `json:"status"`
	} `json:"resources"`
	Backgrounds []struct {
		URL           string `json:"url"`
		Width, Height int
	} `json:"backgrounds"`
	Console []string `json:"console"`
	Text    string   `json:"text"` // with a selector: its element's text
}

// TestWACZReplaysInABrowser, for real: the WACZ of a crawl with requisites,
// opened by ReplayWeb.page in headless Chromium with the site itself gone,
// shows the page with its images decoded at their sizes, its @imported
// stylesheet applied, and every resource it loaded answered from the
// archive.
func TestWACZReplaysInABrowser(t *testing.T) {
	site := replaySite()
	srv := startWireServer(t, site)
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.WARCDir = warcDir })
	id := "replay-" + s.Name
	harness.RunCampaign(t, s, id, campaign.Spec{
		Seeds: []string{"http://" + srv.Host + "/"},
		Scope: campaign.Scope{Hosts: []string{srv.Host}, Requisites: true},
	}, 2*time.Minute)
	s.StopNode(node)
	if hits := site.Hits(); hits["/img/bg.png"] != 1 || hits["/css/base.css"] != 1 {
		t.Fatalf("the crawl did not fetch the requisites: %v", hits)
	}
	srv.srv.Close() // from here on, only the archive can answer

	target := "http://" + srv.Host + "/"
	shown, took := replayWACZ(t, s, id, warcDir, target, "")

	if shown.Title != "archived home" {
		t.Errorf("replayed title %q (frame %s)", shown.Title, shown.Frame)
	}
	if shown.H1Color != "rgb(1, 2, 3)" {
		t.Errorf("h1 is %q: the @imported stylesheet was not replayed", shown.H1Color)
	}
	sizes := map[string][2]int{}
	for _, img := range shown.Images {
		sizes[img.ID] = [2]int{img.Width, img.Height}
	}
	if sizes["logo"] != [2]int{7, 5} || sizes["hi"] != [2]int{9, 9} {
		t.Errorf("images decoded at %v; want logo 7×5 and the srcset one 9×9", sizes)
	}
	for _, bg := range shown.Backgrounds {
		if strings.HasSuffix(bg.URL, "/img/bg.png") {
			sizes["bg"] = [2]int{bg.Width, bg.Height}
		}
	}
	if sizes["bg"] != [2]int{11, 11} {
		t.Errorf("background image decoded at %v from %q; want 11×11", sizes["bg"], shown.BgImage)
	}
	// Replayed resources are /replay/w/COLL/TIMESTAMP{mp_,cs_,im_...}/URL.
	loaded := map[string]int{}
	for _, r := range shown.Resources {
		if i := strings.Index(r.Name, "_/http://"+srv.Host+"/"); i >= 0 && strings.Contains(r.Name, "/replay/w/") {
			loaded[r.Name[i+len("_/http://"+srv.Host):]] = r.Status
		}
	}
	for _, p := range []string{"/css/site.css", "/css/base.css", "/img/logo.png", "/img/hi.png", "/img/bg.png"} {
		if loaded[p] != 200 {
			t.Errorf("%s: replay answered %d; want 200 from the archive (loaded: %v)", p, loaded[p], loaded)
		}
	}
	if t.Failed() {
		t.Logf("browser console: %q", shown.Console)
	}
	t.Logf("replayed %s in %v: title %q, h1 %s, images %v, %d resources from the archive %v",
		shown.Frame, took.Round(time.Millisecond), shown.Title, shown.H1Color, sizes, len(loaded), loaded)
}

// replayWACZ exports the campaign's archive as WACZ and opens target in
// ReplayWeb.page in headless Chromium (replay.mjs), with nothing else to
// answer: what the replayed page shows, and how long it took. selector,
// when set, names an element a script builds, whose text is reported.
func replayWACZ(t *testing.T, s *harness.Stack, id, warcDir, target, selector string) (replayed, time.Duration) {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("this test replays in Chromium (Debian package chromium): %v", err)
	}
	player := servePlayer(t, s, id, warcDir, fmt.Sprintf(`url=%q embed="replayonly"`, target))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var stdout, stderr bytes.Buffer
	args := []string{"replay.mjs", chromium, player + "/index.html", target, "90000"}
	if selector != "" {
		args = append(args, selector)
	}
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay in Chromium: %v\n%s", err, stderr.String())
	}
	var shown replayed
	if err := json.Unmarshal(stdout.Bytes(), &shown); err != nil {
		t.Fatalf("replay.mjs said %q: %v", stdout.String(), err)
	}
	return shown, time.Since(start)
}

// servePlayer exports the campaign's archive as WACZ and serves it with
// ReplayWeb.page's embedding at /index.html: a <replay-web-page> of the
// package, with attrs (url=..., embed=...). It returns the server's base
// URL; nothing else answers.
func servePlayer(t *testing.T, s *harness.Stack, id, warcDir, attrs string) string {
	t.Helper()
	root := t.TempDir()
	cli(t, s, "campaign", "export", id, "--format", "wacz", "--warc-dir", warcDir, "-o", filepath.Join(root, "archive.wacz"))
	installWarcio(t)
	// ReplayWeb.page's embedding: ui.js beside the page; under the replay
	// base sw.js (the service worker, wabac.js) and the app (index.html,
	// ui.js), which the service worker serves itself once it controls the
	// frame, but which the frame may ask the server for before it does.
	for dst, src := range map[string]string{"ui.js": "ui.js", "replay/sw.js": "sw.js", "replay/ui.js": "ui.js", "replay/index.html": "index.html"} {
		src = filepath.Join("node_modules/replaywebpage", src)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(root, dst)), 0o755)
		if err := os.WriteFile(filepath.Join(root, dst), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	embed := fmt.Sprintf(`<!doctype html><html><head><script src="/ui.js"></script></head><body>
<replay-web-page source="/archive.wacz" %s replaybase="/replay/" style="width:800px;height:600px;display:block"></replay-web-page>
</body></html>`, attrs)
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte(embed), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	player := &http.Server{Handler: http.FileServer(http.Dir(root)), ReadHeaderTimeout: 10 * time.Second}
	go player.Serve(l) //nolint:errcheck // ends with Close
	t.Cleanup(func() { player.Close() })
	return "http://" + l.Addr().String()
}

// TestRenderedPageReplaysWithWhatItsScriptsLoaded: the app's view is
// rendered on a browser node that archives; with the site shut down, its
// WACZ replays the view in ReplayWeb.page: the app's script runs again
// from the archive, shows the text it loads by fetch(), and the lazy
// images load when scrolled to.
func TestRenderedPageReplaysWithWhatItsScriptsLoaded(t *testing.T) {
	spa := &synthweb.SPA{Views: 1, Images: 2, Items: 20}
	web := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 1, Custom: map[int]map[string]http.HandlerFunc{0: spa.Site()}})
	host := web.Hosts()[0]
	view := "http://" + host + synthweb.SPARoot + "view/1"
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("browser", 1, func(c *config.Config) { c.Node.WARCDir, c.Node.Browser = warcDir, "auto" })
	id := "render-replay-" + s.Name
	harness.RunCampaign(t, s, id, campaign.Spec{
		Seeds:  []string{view},
		Limits: campaign.Limits{MaxDepth: new(int)}, // the view alone
		Render: &campaign.Render{Hosts: []string{host}, Scroll: campaign.Scroll{Steps: 10}},
	}, 2*time.Minute)
	s.StopNode(node)
	hits := web.Hits()
	for _, p := range []string{"/app/view/1", "/app/app.js", "/app/api/view/1.json", "/app/img/1-1.png", "/app/img/1-2.png"} {
		if hits["http://"+host+p] != 1 {
			t.Fatalf("the render loaded %s %d times, want once (hits %v)", p, hits["http://"+host+p], hits)
		}
	}
	web.Close() // from here on, only the archive can answer

	shown, took := replayWACZ(t, s, id, warcDir, view, "p.data")
	if shown.Text != synthweb.ViewText(1) {
		t.Errorf("replayed text %q, want %q, the fetch()-loaded text", shown.Text, synthweb.ViewText(1))
	}
	loaded := 0
	for _, img := range shown.Images {
		if img.Width == 100 && img.Height == 100 {
			loaded++
		}
	}
	if loaded != spa.Images {
		t.Errorf("%d of %d lazy images replayed at 100×100: %+v", loaded, spa.Images, shown.Images)
	}
	if t.Failed() {
		t.Logf("browser console: %q", shown.Console)
	}
	t.Logf("replayed %s in %v: text %q, %d lazy images", shown.Frame, took.Round(time.Millisecond), shown.Text, loaded)
}
