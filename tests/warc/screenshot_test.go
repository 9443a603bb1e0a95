package warc

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// shotPage's script paints it: a red band 300px high at its top, blue
// below, taller than a screen, so a picture of its top after the render
// scrolled to its bottom is red above and blue below.
const shotPage = `<!doctype html><html><head><title>painted</title><style>body { margin: 0 }</style></head><body>
<script>
for (const [h, c] of [[300, "rgb(255, 0, 0)"], [3000, "rgb(0, 0, 255)"]]) {
  const d = document.body.appendChild(document.createElement("div"));
  d.style.height = h + "px";
  d.style.background = c;
}
</script></body></html>`

// TestRenderedPageScreenshotIsArchived: a render crawl with
// spec.render.screenshot archives, for its page, a resource record
// urn:view:PAGE holding a PNG of the page's top and urn:thumbnail:PAGE a
// JPEG of half its size, as Browsertrix names them; its WACZ lists the
// page in pages.jsonl and indexes both pictures at the page's timestamp;
// warcio.js reads them with their digests verifying; and ReplayWeb.page's
// list of pages shows the page's entry with the thumbnail.
func TestRenderedPageScreenshotIsArchived(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 1, Custom: map[int]map[string]http.HandlerFunc{0: {
		"/painted": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, shotPage)
		}}}})
	host := web.Hosts()[0]
	target := "http://" + host + "/painted"
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("browser", 1, func(c *config.Config) { c.Node.WARCDir, c.Node.Browser = warcDir, "auto" })
	id := "screenshot-" + s.Name
	harness.RunCampaign(t, s, id, campaign.Spec{
		Seeds:  []string{target},
		Limits: campaign.Limits{MaxDepth: new(int)}, // the page alone
		Render: &campaign.Render{Hosts: []string{host}, Scroll: campaign.Scroll{Steps: 10}, Screenshot: true},
	}, 2*time.Minute)
	s.StopNode(node)
	web.Close() // from here on, only the archive can answer

	player := servePlayer(t, s, id, warcDir, "") // no url: the list of pages
	files := packageFiles(t, player+"/archive.wacz")
	if pages := string(files["pages/pages.jsonl"]); strings.Count(pages, "\n") != 2 || !strings.Contains(pages, `"url":"`+target+`"`) {
		t.Fatalf("pages.jsonl lists other than the page %s:\n%s", target, pages)
	}
	index := map[string]cdxjLine{}
	for _, l := range parseCDXJ(t, files["indexes/index.cdxj"]) {
		index[l.URL] = l
	}
	page, ok := index[target]
	if !ok || page.Status != "200" {
		t.Fatalf("the index has no 200 for %s: %+v", target, page)
	}
	pictures := map[string]image.Image{}
	for uri, mime := range map[string]string{"urn:view:" + target: "image/png", "urn:thumbnail:" + target: "image/jpeg"} {
		l, ok := index[uri]
		if !ok || l.Mime != mime || l.timestamp != page.timestamp {
			t.Fatalf("%s indexed as %+v; want %s at the page's timestamp %s", uri, l, mime, page.timestamp)
		}
		pictures[uri] = resourceImage(t, files, l, mime)
	}
	v, th := pictures["urn:view:"+target], pictures["urn:thumbnail:"+target]
	vs, ts := v.Bounds().Size(), th.Bounds().Size()
	if vs.X < 100 || vs.Y < 100 || abs(2*ts.X-vs.X) > 1 || abs(2*ts.Y-vs.Y) > 1 {
		t.Errorf("view %v, thumbnail %v; want a viewport and half of it", vs, ts)
	}
	for uri, img := range pictures {
		top, below := img.At(5, 5), img.At(5, img.Bounds().Dy()-5)
		if !near(top, 255, 0, 0) || !near(below, 0, 0, 255) {
			t.Errorf("%s: %v at the top, %v at the bottom; want the page's top: red, then blue", uri, top, below)
		}
	}
	resourcesVerify(t, files, 2)

	shown := replayThumbnails(t, player)
	if len(shown) != 1 || !strings.HasSuffix(shown[0].Src, "/urn:thumbnail:"+target) || shown[0].Width != ts.X || shown[0].Height != ts.Y {
		t.Errorf("ReplayWeb.page's list of pages shows thumbnails %+v; want the page's, %v", shown, ts)
	}
	t.Logf("page %s at %s: view %v in a record of %s bytes, thumbnail %v in %s bytes; ReplayWeb.page shows %+v",
		target, page.timestamp, vs, index["urn:view:"+target].Length, ts, index["urn:thumbnail:"+target].Length, shown)
}

func abs(n int) int { return max(n, -n) }

// near says whether c is within a JPEG's error of r, g, b.
func near(c color.Color, r, g, b uint8) bool {
	cr, cg, cb, _ := c.RGBA()
	d := func(x uint32, y uint8) bool { return abs(int(x>>8)-int(y)) < 40 }
	return d(cr, r) && d(cg, g) && d(cb, b)
}

// packageFiles downloads a WACZ and returns its files by path.
func packageFiles(t *testing.T, url string) map[string][]byte {
	t.Helper()
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	pkg, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	zr, err := zip.NewReader(bytes.NewReader(pkg), int64(len(pkg)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name], err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s in the package: %v", f.Name, err)
		}
	}
	return files
}

// resourceImage reads the resource record an index line points at in the
// package's files and decodes its block as mime.
func resourceImage(t *testing.T, files map[string][]byte, l cdxjLine, mime string) image.Image {
	t.Helper()
	warc := files["archive/"+l.Filename]
	off, _ := strconv.Atoi(l.Offset)
	n, _ := strconv.Atoi(l.Length)
	if warc == nil || off+n > len(warc) {
		t.Fatalf("%s: the index points at %s %d+%d, not in the package", l.URL, l.Filename, off, n)
	}
	r, err := gowarc.NewWarcFileReaderFromStream(bytes.NewReader(warc[off:off+n]), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil {
		t.Fatalf("%s: no record at %s %d: %v", l.URL, l.Filename, off, err)
	}
	defer rec.Close()
	h := rec.WarcRecord.WarcHeader()
	if rec.WarcRecord.Type() != gowarc.Resource || h.Get(gowarc.WarcTargetURI) != l.URL || h.Get(gowarc.ContentType) != mime {
		t.Fatalf("%s resolves to a %s record of %s, %s", l.URL, rec.WarcRecord.Type(), h.Get(gowarc.WarcTargetURI), h.Get(gowarc.ContentType))
	}
	raw, err := rec.WarcRecord.Block().RawBytes()
	if err != nil {
		t.Fatal(err)
	}
	decode := png.Decode
	if mime == "image/jpeg" {
		decode = jpeg.Decode
	}
	img, err := decode(raw)
	if err != nil {
		t.Fatalf("%s: the record holds no %s: %v", l.URL, mime, err)
	}
	return img
}

// resourcesVerify has warcio.js, webrecorder's reader, read the package's
// WARC files: want resource records, each digest verifying.
func resourcesVerify(t *testing.T, files map[string][]byte, want int) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for name, data := range files {
		if strings.HasPrefix(name, "archive/") {
			p := filepath.Join(dir, filepath.Base(name))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
	}
	read := 0
	for _, r := range warcio(t, paths...) {
		if r.Type != "resource" {
			continue
		}
		read++
		if r.BlockDigestOK == nil || !*r.BlockDigestOK || r.PayloadDigestOK != nil && !*r.PayloadDigestOK {
			t.Errorf("%s: a digest does not verify", r.Get("WARC-Target-URI"))
		}
	}
	if read != want {
		t.Errorf("warcio read %d resource records, want %d", read, want)
	}
}

// thumbnail is a page's thumbnail as ReplayWeb.page shows it.
type thumbnail struct {
	Src           string `json:"src"`
	Width, Height int
}

// replayThumbnails opens the player's list of pages in ReplayWeb.page in
// headless Chromium (thumbnail.mjs): the thumbnails it shows.
func replayThumbnails(t *testing.T, player string) []thumbnail {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("this test replays in Chromium (Debian package chromium): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", "thumbnail.mjs", chromium, player+"/index.html", "90000")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ReplayWeb.page's list of pages in Chromium: %v\n%s", err, stderr.String())
	}
	var shown struct {
		Thumbnails []thumbnail `json:"thumbnails"`
		Console    []string    `json:"console"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &shown); err != nil {
		t.Fatalf("thumbnail.mjs said %q: %v", stdout.String(), err)
	}
	if len(shown.Thumbnails) == 0 {
		t.Logf("browser console: %q", shown.Console)
	}
	return shown.Thumbnails
}
