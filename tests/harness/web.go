package harness

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// StartWeb serves a synthetic web for the test and closes it when the test
// ends.
func StartWeb(t testing.TB, cfg synthweb.Config) *synthweb.Web {
	t.Helper()
	web, err := synthweb.Start(cfg)
	if err != nil {
		t.Fatalf("synthetic web: %v", err)
	}
	t.Cleanup(web.Close)
	return web
}

// Gzipped is s compressed as a server sends a .gz file (a sitemap, a
// gzip-encoded page).
func Gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}
