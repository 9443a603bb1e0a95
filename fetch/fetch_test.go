package fetch

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func opts() Options {
	return Options{UserAgent: "spiderpool-test", ConnectTimeout: time.Second, RequestTimeout: 5 * time.Second, MaxBodyBytes: 1 << 10, KeepBody: true}
}

func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestGetHTMLKeepsBodyAndSendsUserAgent(t *testing.T) {
	var ua string
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		ua = r.UserAgent()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte("<a href=/x>x</a>"))
	})
	r := New(4).Get(context.Background(), url, opts())
	if r.Err != nil || r.Status != 200 || string(r.Body) != "<a href=/x>x</a>" || !r.IsHTML() || ua != "spiderpool-test" {
		t.Fatalf("response %+v, user agent %q", r, ua)
	}
	if !strings.HasPrefix(r.Digest, "sha256:") || r.Length != 16 || Classify(&r, nil) != Done {
		t.Fatalf("digest %q length %d verdict %v", r.Digest, r.Length, Classify(&r, nil))
	}
}

func TestBodyCapHoldsAfterDecompression(t *testing.T) {
	// 1 MiB of zeros gzips to about 1 KiB: the cap must count what comes
	// out, not what goes in.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(gz.Bytes())
	})
	r := New(4).Get(context.Background(), url, opts())
	if r.Err != nil || r.Length != 1<<10 || !r.Truncated || len(r.Body) != 1<<10 {
		t.Fatalf("gzip bomb: err %v length %d truncated %v body %d; want capped at 1 KiB", r.Err, r.Length, r.Truncated, len(r.Body))
	}
}

func TestNonHTMLBodyIsHashedNotKept(t *testing.T) {
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG...."))
	})
	r := New(4).Get(context.Background(), url, opts())
	if r.Body != nil || r.Length != 8 || r.IsHTML() || r.ContentType != "image/png" {
		t.Fatalf("response %+v", r)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusMovedPermanently)
	})
	r := New(4).Get(context.Background(), url, opts())
	if r.Status != 301 || r.Location != "/elsewhere" || Classify(&r, nil) != Done {
		t.Fatalf("status %d location %q", r.Status, r.Location)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		r            Response
		nonRetryable []int
		want         Verdict
	}{
		{Response{Status: 200}, nil, Done},
		{Response{Status: 404}, nil, Final},
		{Response{Status: 410}, nil, Final},
		{Response{Status: 408}, nil, Transient},
		{Response{Status: 429}, nil, Transient},
		{Response{Status: 503}, nil, Transient},
		{Response{Status: 503}, []int{503}, Final},
		{Response{Err: context.DeadlineExceeded}, nil, Transient},
		{Response{Err: &net.OpError{Op: "dial", Err: errors.New("connect: connection refused")}}, nil, Transient},
		{Response{Err: &net.DNSError{Err: "no such host", IsNotFound: true}}, nil, Final},
		{Response{Err: errors.New("x509: certificate signed by unknown authority")}, nil, Final},
		{Response{Status: 200, Err: errors.New("unexpected EOF")}, nil, Transient},
	} {
		if got := Classify(&tc.r, tc.nonRetryable); got != tc.want {
			t.Errorf("Classify(%+v, %v) = %v, want %v", tc.r, tc.nonRetryable, got, tc.want)
		}
	}
}

func TestTimeoutsAreTransient(t *testing.T) {
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	o := opts()
	o.RequestTimeout = 100 * time.Millisecond
	r := New(4).Get(context.Background(), url, o)
	if r.Err == nil || Classify(&r, nil) != Transient || !strings.HasPrefix(Describe(&r), "timeout") {
		t.Fatalf("slow server: err %v verdict %v describe %q", r.Err, Classify(&r, nil), Describe(&r))
	}
}

func TestRefusedConnectionIsTransient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := New(4).Get(context.Background(), "http://"+addr+"/", opts())
	if r.Err == nil || Classify(&r, nil) != Transient {
		t.Fatalf("refused: %+v", r)
	}
}
