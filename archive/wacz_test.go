package archive

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"
)

func TestSURT(t *testing.T) {
	for in, want := range map[string]string{
		"http://www.Example.com:8080/A?b=1&a=2": "com,example:8080)/a?a=2&b=1",
		"https://example.com/":                  "com,example)/",
		"https://example.com:443/x":             "com,example)/x",
		"http://127.0.0.1:8080/p/1.html":        "127.0.0.1:8080)/p/1.html",
		"http://sub.example.org":                "org,example,sub)/",
	} {
		if got := SURT(in); got != want {
			t.Errorf("SURT(%q) = %q, want %q", in, got, want)
		}
	}
}

// wacz opens a package and returns its files by path.
func unzip(t *testing.T, pkg []byte) map[string][]byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(pkg), int64(len(pkg)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range zr.File {
		if f.Method != zip.Store {
			t.Errorf("%s is compressed; WACZ entries are stored, for reading by range", f.Name)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		out[f.Name], _ = io.ReadAll(rc)
		rc.Close()
	}
	return out
}

func TestWACZHoldsFilesIndexPagesAndDigests(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "n1", 3_000)
	if err != nil {
		t.Fatal(err)
	}
	idx := &memIndex{held: map[string]Payload{}}
	write(t, w, idx, exchange(1, page(1)), exchange(2, page(1)))
	for i := 3; i < 20; i++ {
		write(t, w, idx, exchange(i, page(i)))
	}
	w.Close()
	files, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	var pkg bytes.Buffer
	pages := []WACZPage{{URL: exchange(1, "").URL, Title: "one"}, {URL: exchange(2, "").URL}, {URL: "http://127.0.0.1:8080/never"}}
	sum, err := WriteWACZ(&pkg, files, WACZOptions{Title: "c1", Pages: pages})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Files != len(files) || sum.Records != 19 || sum.Pages != 2 || len(files) < 2 {
		t.Fatalf("summary %+v for %d files; want every file, 19 records, the 2 pages archived", sum, len(files))
	}
	got := unzip(t, pkg.Bytes())

	var dp struct {
		Profile   string `json:"profile"`
		Version   string `json:"wacz_version"`
		MainPage  string `json:"mainPageUrl"`
		Resources []resource
	}
	if err := json.Unmarshal(got["datapackage.json"], &dp); err != nil {
		t.Fatal(err)
	}
	if dp.Profile != "data-package" || dp.Version != "1.1.1" || dp.MainPage != pages[0].URL || len(dp.Resources) != len(files)+2 {
		t.Errorf("datapackage %+v", dp)
	}
	for _, r := range dp.Resources {
		s := sha256.Sum256(got[r.Path])
		if r.Hash != "sha256:"+hex.EncodeToString(s[:]) || r.Bytes != int64(len(got[r.Path])) {
			t.Errorf("%s: datapackage says %s, %d bytes; it is %x, %d bytes", r.Path, r.Hash, r.Bytes, s, len(got[r.Path]))
		}
	}
	var dd struct{ Path, Hash string }
	json.Unmarshal(got["datapackage-digest.json"], &dd)
	if s := sha256.Sum256(got["datapackage.json"]); dd.Path != "datapackage.json" || dd.Hash != "sha256:"+hex.EncodeToString(s[:]) {
		t.Errorf("datapackage-digest.json %+v", dd)
	}

	var lines []string
	types := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(got["indexes/index.cdxj"]))
	for sc.Scan() {
		lines = append(lines, sc.Text())
		key, rest, _ := strings.Cut(sc.Text(), " ")
		ts, js, _ := strings.Cut(rest, " ")
		var e CDXJEntry
		if err := json.Unmarshal([]byte(js), &e); err != nil {
			t.Fatalf("index line %q: %v", sc.Text(), err)
		}
		if key != SURT(e.URL) || len(ts) != 14 {
			t.Errorf("line %q: key or timestamp wrong", sc.Text())
		}
		// The line resolves to its record: read it at its offset.
		off, _ := strconv.Atoi(e.Offset)
		n, _ := strconv.Atoi(e.Length)
		warc := got["archive/"+e.Filename]
		if off+n > len(warc) {
			t.Fatalf("line %q points past %s", sc.Text(), e.Filename)
		}
		r, err := gowarc.NewWarcFileReaderFromStream(bytes.NewReader(warc[off:off+n]), 0)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("line %q: no record at its offset: %v", sc.Text(), err)
		}
		types[rec.WarcRecord.Type().String()]++
		if rec.WarcRecord.WarcHeader().Get(gowarc.WarcTargetURI) != e.URL || (e.Mime == "warc/revisit") != (rec.WarcRecord.Type() == gowarc.Revisit) {
			t.Errorf("line %q resolves to a %s record of %s", sc.Text(), rec.WarcRecord.Type(), rec.WarcRecord.WarcHeader().Get(gowarc.WarcTargetURI))
		}
		rec.Close()
		r.Close()
	}
	if !slices.IsSorted(lines) || len(lines) != 19 || types["revisit"] != 1 || types["response"] != 18 {
		t.Errorf("%d index lines (sorted %v), by type %v; want 19 sorted, 18 responses and the revisit", len(lines), slices.IsSorted(lines), types)
	}
	pl := strings.Split(strings.TrimSpace(string(got["pages/pages.jsonl"])), "\n")
	if len(pl) != 3 || !strings.Contains(pl[0], `"format":"json-pages-1.0"`) || !strings.Contains(pl[1], `"title":"one"`) ||
		!strings.Contains(pl[1], `"ts":"`+exchange(1, "").Date.UTC().Format(time.RFC3339)+`"`) {
		t.Errorf("pages.jsonl:\n%s", got["pages/pages.jsonl"])
	}
}
