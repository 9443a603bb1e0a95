package warc

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
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
)

// cli runs the spiderpool binary against the stack, bounded in time; a
// command that fails fails the test.
func cli(t *testing.T, s *harness.Stack, args ...string) (stdout, stderr string) {
	t.Helper()
	args = append(args, "--temporal-address", s.Config.TemporalAddress, "--database-url", s.Config.DatabaseURL,
		"--control-queue", s.Config.ControlQueue)
	cmd := exec.Command(harness.Binary(t), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "TEMPORAL_ADDRESS=")
	r := harness.RunCommand(t, 2*time.Minute, cmd)
	if r.Code != 0 {
		t.Fatalf("spiderpool %v: exit %d\n%s", args, r.Code, r.Stderr)
	}
	return r.Stdout, r.Stderr
}

// cdxjLine is one line of a CDXJ index, parsed.
type cdxjLine struct {
	key, timestamp string
	URL            string `json:"url"`
	Mime           string `json:"mime"`
	Status         string `json:"status"`
	Digest         string `json:"digest"`
	Offset         string `json:"offset"`
	Length         string `json:"length"`
	Filename       string `json:"filename"`
}

func parseCDXJ(t *testing.T, data []byte) []cdxjLine {
	t.Helper()
	var out []cdxjLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, rest, _ := strings.Cut(sc.Text(), " ")
		ts, js, _ := strings.Cut(rest, " ")
		l := cdxjLine{key: key, timestamp: ts}
		if err := json.Unmarshal([]byte(js), &l); err != nil || len(ts) != 14 {
			t.Fatalf("CDXJ line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestWACZOfACrawlValidates (the package, not the replay): `campaign export
// --format wacz` of a crawl with requisites gives a WACZ whose
// datapackage.json digests match its files, whose CDXJ resolves every page
// of pages.jsonl to the page's response record, and whose WARC files
// warcio.js reads with every digest verifying; `--format cdxj` gives the
// same index.
func TestWACZOfACrawlValidates(t *testing.T) {
	outside := &countingSite{hits: map[string]int{}, files: map[string]file{}}
	otherSrv := startWireServer(t, outside)
	site := requisiteSite(otherSrv.Host)
	srv := startWireServer(t, site)
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.WARCDir = warcDir })
	id := "wacz-" + s.Name
	harness.RunCampaign(t, s, id, campaign.Spec{
		Seeds: []string{"http://" + srv.Host + "/"},
		Scope: campaign.Scope{Hosts: []string{srv.Host}, Requisites: true},
	}, 2*time.Minute)
	s.StopNode(node)

	out := filepath.Join(t.TempDir(), id+".wacz")
	start := time.Now()
	_, stderr := cli(t, s, "campaign", "export", id, "--format", "wacz", "--warc-dir", warcDir, "-o", out)
	took := time.Since(start)
	cdxj, _ := cli(t, s, "campaign", "export", id, "--format", "cdxj", "--warc-dir", warcDir)

	zr, err := zip.OpenReader(out)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
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

	var dp struct {
		Profile   string `json:"profile"`
		Version   string `json:"wacz_version"`
		Resources []struct {
			Path  string `json:"path"`
			Hash  string `json:"hash"`
			Bytes int64  `json:"bytes"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(files["datapackage.json"], &dp); err != nil {
		t.Fatalf("datapackage.json: %v", err)
	}
	listed := map[string]bool{}
	var warcs []string
	for _, r := range dp.Resources {
		listed[r.Path] = true
		sum := sha256.Sum256(files[r.Path])
		if data, ok := files[r.Path]; !ok || r.Hash != "sha256:"+hex.EncodeToString(sum[:]) || r.Bytes != int64(len(data)) {
			t.Errorf("%s: datapackage.json says %s, %d bytes; the package holds %d bytes hashing to %x", r.Path, r.Hash, r.Bytes, len(data), sum)
		}
		if strings.HasPrefix(r.Path, "archive/") {
			warcs = append(warcs, r.Path)
		}
	}
	for name := range files {
		if !listed[name] && name != "datapackage.json" && name != "datapackage-digest.json" {
			t.Errorf("%s is in the package but not in datapackage.json", name)
		}
	}
	if dp.Profile != "data-package" || dp.Version != "1.1.1" || len(warcs) == 0 || !listed["indexes/index.cdxj"] || !listed["pages/pages.jsonl"] {
		t.Fatalf("datapackage.json %s", files["datapackage.json"])
	}

	index := parseCDXJ(t, files["indexes/index.cdxj"])
	if strings.TrimSpace(cdxj) != strings.TrimSpace(string(files["indexes/index.cdxj"])) {
		t.Errorf("export --format cdxj differs from the package's index:\n%s\n---\n%s", cdxj, files["indexes/index.cdxj"])
	}
	var pages []struct {
		URL, TS, Title string
	}
	for i, line := range strings.Split(strings.TrimSpace(string(files["pages/pages.jsonl"])), "\n") {
		if i == 0 {
			if !strings.Contains(line, `"format":"json-pages-1.0"`) {
				t.Errorf("pages.jsonl header %q", line)
			}
			continue
		}
		var p struct{ URL, TS, Title string }
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("pages.jsonl line %q: %v", line, err)
		}
		pages = append(pages, p)
	}
	if len(pages) != 2 {
		t.Errorf("pages.jsonl lists %d pages, want the 2 HTML pages: %s", len(pages), files["pages/pages.jsonl"])
	}
	for _, p := range pages {
		var hit *cdxjLine
		for i := range index {
			if index[i].URL == p.URL && index[i].Status == "200" {
				hit = &index[i]
			}
		}
		if hit == nil {
			t.Errorf("page %s: no line of the index resolves it", p.URL)
			continue
		}
		warc := files["archive/"+hit.Filename]
		off, _ := strconv.Atoi(hit.Offset)
		n, _ := strconv.Atoi(hit.Length)
		if warc == nil || off+n > len(warc) {
			t.Errorf("page %s: index points at %s %d+%d, not in the package", p.URL, hit.Filename, off, n)
			continue
		}
		r, err := gowarc.NewWarcFileReaderFromStream(bytes.NewReader(warc[off:off+n]), 0)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.Next()
		if err != nil {
			t.Errorf("page %s: no record at %s %d: %v", p.URL, hit.Filename, off, err)
			continue
		}
		h := rec.WarcRecord.WarcHeader()
		if rec.WarcRecord.Type() != gowarc.Response || h.Get(gowarc.WarcTargetURI) != p.URL || len(rec.Validation) > 0 {
			t.Errorf("page %s resolves to a %s record of %s (%v)", p.URL, rec.WarcRecord.Type(), h.Get(gowarc.WarcTargetURI), rec.Validation)
		}
		rec.Close()
		r.Close()
	}

	// warcio.js reads the package's WARC files, every digest verifying.
	dir := t.TempDir()
	var paths []string
	for _, w := range warcs {
		p := filepath.Join(dir, filepath.Base(w))
		if err := os.WriteFile(p, files[w], 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	recs := warcio(t, paths...)
	bad := 0
	for _, r := range recs {
		if r.BlockDigestOK == nil || !*r.BlockDigestOK || r.PayloadDigestOK != nil && !*r.PayloadDigestOK {
			bad++
			t.Errorf("%s %s: a digest does not verify", r.Type, r.Get("WARC-Target-URI"))
		}
	}
	if len(recs) < len(index) {
		t.Errorf("warcio read %d records, the index has %d lines", len(recs), len(index))
	}
	info, _ := os.Stat(out)
	t.Logf("WACZ %d bytes (%d WARC files, %d index lines, %d pages) exported in %v; warcio read %d records, %d bad; %s",
		info.Size(), len(warcs), len(index), len(pages), took.Round(time.Millisecond), len(recs), bad, strings.TrimSpace(stderr))
}
