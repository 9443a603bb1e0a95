package archive

import (
	"archive/zip"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"mime"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nlnwa/gowarc/v3"
)

// A campaign's archive is exported two ways: a CDXJ index of its WARC files
// (the sorted, one-line-a-record index pywb and ReplayWeb.page read), and a
// WACZ package (Web Archive Collection Zipped, webrecorder's format: the
// WARC files, that index, pages.jsonl and datapackage.json with a SHA-256
// of every file), which replayweb.page and pywb open as it is.

// CDXJEntry is one line of a CDXJ index: the record of a capture.
type CDXJEntry struct {
	URLKey    string `json:"-"` // SURT form of URL, the sort key
	Timestamp string `json:"-"` // YYYYMMDDhhmmss of WARC-Date
	URL       string `json:"url"`
	Mime      string `json:"mime"` // the response's media type; warc/revisit for a revisit
	Status    string `json:"status,omitempty"`
	Digest    string `json:"digest,omitempty"`
	Length    string `json:"length"`
	Offset    string `json:"offset"`
	Filename  string `json:"filename"`
	// Date is WARC-Date as written (not in the line).
	Date time.Time `json:"-"`
}

// String is the entry as a CDXJ line, without its newline.
func (e CDXJEntry) String() string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e)
	return e.URLKey + " " + e.Timestamp + " " + strings.TrimSuffix(b.String(), "\n")
}

// CDXJ reads WARC files and returns a CDXJ entry for each response,
// revisit and resource record, sorted as CDXJ is (by line). An entry's
// Filename is name(file).
func CDXJ(files []string, name func(file string) string) ([]CDXJEntry, error) {
	var out []CDXJEntry
	for _, f := range files {
		err := ReadFile(f, func(rec gowarc.Record) error {
			wr := rec.WarcRecord
			switch wr.Type() {
			case gowarc.Response, gowarc.Revisit, gowarc.Resource:
			default:
				return nil
			}
			h := wr.WarcHeader()
			date, err := h.GetTime(gowarc.WarcDate)
			if err != nil {
				return fmt.Errorf("%s at %d: WARC-Date: %w", f, rec.Offset, err)
			}
			e := CDXJEntry{
				URL: h.Get(gowarc.WarcTargetURI), Timestamp: date.UTC().Format("20060102150405"), Date: date,
				Digest: h.Get(gowarc.WarcPayloadDigest), Filename: name(f),
				Offset: strconv.FormatInt(rec.Offset, 10), Length: strconv.FormatInt(rec.Size, 10),
			}
			e.URLKey = SURT(e.URL)
			if hb, ok := wr.Block().(gowarc.HttpResponseBlock); ok {
				e.Status = strconv.Itoa(hb.HttpStatusCode())
				if hh := hb.HttpHeader(); hh != nil {
					e.Mime = mediaType(hh.Get("Content-Type"))
				}
			} else if wr.Type() == gowarc.Resource {
				e.Mime = mediaType(h.Get(gowarc.ContentType))
			}
			if wr.Type() == gowarc.Revisit {
				e.Mime = "warc/revisit"
				if e.Status == "" {
					if _, status, ok := strings.Cut(string(revisitHead(wr)), " "); ok && len(status) >= 3 {
						e.Status = status[:3]
					}
				}
			}
			if e.Mime == "" {
				e.Mime = "unk"
			}
			out = append(out, e)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b CDXJEntry) int { return cmp.Compare(a.String(), b.String()) })
	return out, nil
}

func revisitHead(wr gowarc.WarcRecord) []byte {
	if hb, ok := wr.Block().(gowarc.ProtocolHeaderBlock); ok {
		return hb.ProtocolHeaderBytes()
	}
	return nil
}

func mediaType(ct string) string {
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return strings.ToLower(mt)
	}
	return strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
}

// SURT is the Sort-friendly URI Reordering Transform of an http(s) URL, as
// CDX indexes key their lines: scheme and "www." dropped, host labels
// reversed and comma-joined (an IP address stays as it is), a port that
// is not the scheme's kept, then ")" and the path and query, lower case,
// query parameters sorted. "http://www.Example.com:8080/a?b=1&a=2" is
// "com,example:8080)/a?a=2&b=1".
func SURT(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return strings.ToLower(raw)
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if net.ParseIP(host) == nil {
		host = strings.TrimPrefix(host, "www.")
		labels := strings.Split(host, ".")
		slices.Reverse(labels)
		host = strings.Join(labels, ",")
	}
	if port != "" && !(u.Scheme == "http" && port == "80") && !(u.Scheme == "https" && port == "443") {
		host += ":" + port
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	key := host + ")" + path
	if u.RawQuery != "" {
		params := strings.Split(u.RawQuery, "&")
		slices.Sort(params)
		key += "?" + strings.Join(params, "&")
	}
	return strings.ToLower(key)
}

// WriteCDXJ writes entries as a CDXJ file.
func WriteCDXJ(w io.Writer, entries []CDXJEntry) error {
	for _, e := range entries {
		if _, err := io.WriteString(w, e.String()+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// WACZPage is a page of a WACZ's pages.jsonl: what a replay lists.
type WACZPage struct {
	URL   string
	Title string
}

// WACZOptions describe a package.
type WACZOptions struct {
	Title       string // the collection's, e.g. the campaign ID
	Description string
	// Pages are the pages to list, in order; those with no 2xx response
	// record in the files (kept out, noarchive) are left out.
	Pages []WACZPage
	// Created is the package's creation time; zero is now.
	Created time.Time
}

// WACZSummary says what a package holds.
type WACZSummary struct {
	Files   int // WARC files
	Records int // CDXJ entries
	Pages   int
}

// waczName is a WARC file's name in the package: its base name, without
// the .open of a file still being written.
func waczName(file string) string { return strings.TrimSuffix(filepath.Base(file), ".open") }

// WriteWACZ writes a WACZ 1.1.1 package of files to w: archive/ the WARC
// files, indexes/index.cdxj, pages/pages.jsonl, datapackage.json listing
// every file with its SHA-256 and size, and datapackage-digest.json with
// the SHA-256 of datapackage.json. Entries are stored, not compressed: WARC
// records are gzip members already, and replay reads them by byte range.
func WriteWACZ(w io.Writer, files []string, o WACZOptions) (WACZSummary, error) {
	var sum WACZSummary
	if len(files) == 0 {
		return sum, errors.New("no WARC files to package")
	}
	seen := map[string]string{}
	for _, f := range files {
		if other, dup := seen[waczName(f)]; dup {
			return sum, fmt.Errorf("WARC files %s and %s have one name in a package", other, f)
		}
		seen[waczName(f)] = f
	}
	entries, err := CDXJ(files, waczName)
	if err != nil {
		return sum, err
	}
	var index bytes.Buffer
	if err := WriteCDXJ(&index, entries); err != nil {
		return sum, err
	}
	pages, listed := pagesJSONL(entries, o.Pages)

	created := o.Created
	if created.IsZero() {
		created = time.Now()
	}
	z := zip.NewWriter(w)
	var resources []resource
	for _, f := range files {
		r, err := storeFile(z, "archive/"+waczName(f), f, created)
		if err != nil {
			return sum, err
		}
		resources = append(resources, r)
	}
	for _, b := range []struct {
		path string
		data []byte
	}{{"indexes/index.cdxj", index.Bytes()}, {"pages/pages.jsonl", pages}} {
		r, err := storeBytes(z, b.path, b.data, created)
		if err != nil {
			return sum, err
		}
		resources = append(resources, r)
	}
	pkg := map[string]any{
		"profile": "data-package", "wacz_version": "1.1.1",
		"title": o.Title, "description": o.Description,
		"created": created.UTC().Format(time.RFC3339), "modified": created.UTC().Format(time.RFC3339),
		"software": Software(), "resources": resources,
	}
	if len(o.Pages) > 0 && listed > 0 {
		first := firstCapture(entries, o.Pages)
		if first != nil {
			pkg["mainPageUrl"], pkg["mainPageDate"] = first.URL, first.Date.UTC().Format(time.RFC3339)
		}
	}
	dp, err := json.MarshalIndent(pkg, "", "  ")
	if err != nil {
		return sum, err
	}
	if _, err := storeBytes(z, "datapackage.json", dp, created); err != nil {
		return sum, err
	}
	dpSum := sha256.Sum256(dp)
	digest, _ := json.MarshalIndent(map[string]string{"path": "datapackage.json", "hash": "sha256:" + hex.EncodeToString(dpSum[:])}, "", "  ")
	if _, err := storeBytes(z, "datapackage-digest.json", digest, created); err != nil {
		return sum, err
	}
	if err := z.Close(); err != nil {
		return sum, err
	}
	return WACZSummary{Files: len(files), Records: len(entries), Pages: listed}, nil
}

// resource is one file of a package in its datapackage.json.
type resource struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Hash  string `json:"hash"`
	Bytes int64  `json:"bytes"`
}

// pagesJSONL lists the pages that have a 2xx response (or revisit of one)
// in the index, each at its first capture.
func pagesJSONL(entries []CDXJEntry, pages []WACZPage) ([]byte, int) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"format": "json-pages-1.0", "id": "pages", "title": "All Pages"})
	captured := map[string]CDXJEntry{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Status, "2") {
			continue
		}
		if prev, ok := captured[e.URL]; !ok || e.Date.Before(prev.Date) {
			captured[e.URL] = e
		}
	}
	n := 0
	for i, p := range pages {
		e, ok := captured[p.URL]
		if !ok {
			continue
		}
		page := map[string]string{"id": fmt.Sprintf("p%d", i+1), "url": p.URL, "ts": e.Date.UTC().Format(time.RFC3339)}
		if p.Title != "" {
			page["title"] = p.Title
		}
		_ = enc.Encode(page)
		n++
	}
	return b.Bytes(), n
}

func firstCapture(entries []CDXJEntry, pages []WACZPage) *CDXJEntry {
	for _, p := range pages {
		for i := range entries {
			if entries[i].URL == p.URL && strings.HasPrefix(entries[i].Status, "2") {
				return &entries[i]
			}
		}
	}
	return nil
}

// storeFile adds a file to the zip uncompressed, its CRC and sizes known
// before its bytes (one read to learn them, one to copy), so the entry
// needs no data descriptor.
func storeFile(z *zip.Writer, name, path string, modified time.Time) (resource, error) {
	f, err := os.Open(path)
	if err != nil {
		return resource{}, err
	}
	defer f.Close()
	crc, sha := crc32.NewIEEE(), sha256.New()
	n, err := io.Copy(io.MultiWriter(crc, sha), f)
	if err != nil {
		return resource{}, fmt.Errorf("read %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return resource{}, err
	}
	w, err := z.CreateRaw(&zip.FileHeader{
		Name: name, Method: zip.Store, Modified: modified,
		CRC32: crc.Sum32(), CompressedSize64: uint64(n), UncompressedSize64: uint64(n),
	})
	if err != nil {
		return resource{}, err
	}
	copied, err := io.Copy(w, f)
	if err != nil {
		return resource{}, fmt.Errorf("package %s: %w", path, err)
	}
	if copied != n {
		return resource{}, fmt.Errorf("package %s: it changed while being packaged (%d bytes, then %d)", path, n, copied)
	}
	return resource{Name: filepath.Base(name), Path: name, Hash: "sha256:" + hex.EncodeToString(sha.Sum(nil)), Bytes: n}, nil
}

func storeBytes(z *zip.Writer, name string, data []byte, modified time.Time) (resource, error) {
	w, err := z.CreateRaw(&zip.FileHeader{
		Name: name, Method: zip.Store, Modified: modified,
		CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data)),
	})
	if err != nil {
		return resource{}, err
	}
	if _, err := w.Write(data); err != nil {
		return resource{}, err
	}
	sum := sha256.Sum256(data)
	return resource{Name: filepath.Base(name), Path: name, Hash: "sha256:" + hex.EncodeToString(sum[:]), Bytes: int64(len(data))}, nil
}
