package archive

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"
)

// ReadBack is what tests learn from a directory of WARC files.
type readBack struct {
	responses map[string]int // target URI -> response records
	requests  map[string]int
	bodies    map[string]string
	files     int
}

func readAll(t *testing.T, dir string) readBack {
	t.Helper()
	files, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	rb := readBack{responses: map[string]int{}, requests: map[string]int{}, bodies: map[string]string{}, files: len(files)}
	err = ReadDir(dir, func(file string, wr gowarc.WarcRecord, problems []error) error {
		if len(problems) > 0 {
			t.Errorf("%s: record does not validate: %v", file, problems)
		}
		uri := wr.WarcHeader().Get(gowarc.WarcTargetURI)
		switch wr.Type() {
		case gowarc.Response:
			rb.responses[uri]++
			if hb, ok := wr.Block().(gowarc.HttpResponseBlock); ok {
				if p, err := hb.PayloadBytes(); err == nil {
					body, _ := io.ReadAll(p)
					rb.bodies[uri] = string(body)
				}
			}
		case gowarc.Request:
			rb.requests[uri]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rb
}

func exchange(i int) Exchange {
	body := fmt.Sprintf("<html><title>page %d</title>%s</html>", i, strings.Repeat("x", 2000))
	return Exchange{
		URL: fmt.Sprintf("http://127.0.0.1:8080/p/%d", i), Date: time.Unix(1700000000, 0),
		Method: http.MethodGet, RequestHeader: http.Header{"User-Agent": {"spiderpool-test"}},
		Proto: "HTTP/1.1", Status: 200, Header: http.Header{"Content-Type": {"text/html"}, "Content-Encoding": {"gzip"}},
		Body: []byte(body), Decompressed: true,
	}
}

func TestWrittenRecordsReadBackValidAndRotate(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "node/1", 20_000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := w.Write(exchange(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rb := readAll(t, dir)
	if rb.files < 2 {
		t.Errorf("%d file(s) for ~100 KB at 20 KB a file: not rotated", rb.files)
	}
	for i := range 50 {
		uri := exchange(i).URL
		if rb.responses[uri] != 1 || rb.requests[uri] != 1 {
			t.Errorf("%s: %d response and %d request records, want one each", uri, rb.responses[uri], rb.requests[uri])
		}
		if want := string(exchange(i).Body); rb.bodies[uri] != want {
			t.Errorf("%s: payload %q..., want the body as fetched", uri, rb.bodies[uri][:min(40, len(rb.bodies[uri]))])
		}
	}
}

func TestOpenNamesAnUnwritableDirectory(t *testing.T) {
	_, err := Open("/proc/spiderpool-warc", "n1", 0)
	if err == nil || !strings.Contains(err.Error(), "/proc/spiderpool-warc") {
		t.Fatalf("err = %v, want one naming the directory", err)
	}
}

func TestRequestBlockIsTheRequestAsSent(t *testing.T) {
	ex := exchange(3)
	ex.URL = "http://127.0.0.1:8080/p/3?a=1&b=2"
	got := string(requestBlock(ex))
	want := "GET /p/3?a=1&b=2 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: spiderpool-test\r\n\r\n"
	if got != want {
		t.Fatalf("request block %q, want %q", got, want)
	}
}
