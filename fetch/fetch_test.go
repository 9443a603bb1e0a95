package fetch

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
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
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), url, opts())
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
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), url, opts())
	if r.Err != nil || r.Length != 1<<10 || !r.Truncated || len(r.Body) != 1<<10 {
		t.Fatalf("gzip bomb: err %v length %d truncated %v body %d; want capped at 1 KiB", r.Err, r.Length, r.Truncated, len(r.Body))
	}
}

func TestNonHTMLBodyIsHashedNotKept(t *testing.T) {
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG...."))
	})
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), url, opts())
	if r.Body != nil || r.Length != 8 || r.IsHTML() || r.ContentType != "image/png" {
		t.Fatalf("response %+v", r)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusMovedPermanently)
	})
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), url, opts())
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
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), url, o)
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
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), "http://"+addr+"/", opts())
	if r.Err == nil || Classify(&r, nil) != Transient {
		t.Fatalf("refused: %+v", r)
	}
}

func TestGuardRefusesNonPublicAddresses(t *testing.T) {
	var g Guard
	for _, a := range []string{"127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
		"::1", "fe80::1", "fc00::1", "0.0.0.0", "100.64.1.1", "224.0.0.1", "::ffff:127.0.0.1", "::ffff:10.1.2.3", "255.255.255.255"} {
		if err := g.Check(netip.MustParseAddr(a)); !errors.Is(err, ErrBlocked) {
			t.Errorf("Check(%s) = %v, want blocked", a, err)
		}
	}
	for _, a := range []string{"93.184.216.34", "8.8.8.8", "2606:4700::6810:85e5", "1.1.1.1"} {
		if err := g.Check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("Check(%s) = %v, want allowed", a, err)
		}
	}
	exc := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	if exc.Check(netip.MustParseAddr("10.1.2.3")) != nil || exc.Check(netip.MustParseAddr("10.2.0.1")) == nil {
		t.Error("allow-list exceptions not applied")
	}
	if (Guard{AllowPrivate: true}).Check(netip.MustParseAddr("127.0.0.1")) != nil {
		t.Error("AllowPrivate does not allow loopback")
	}
}

// TestGuardRefusesBeforeConnecting listens on loopback and checks that a
// guarded fetch never reaches the listener.
func TestGuardRefusesBeforeConnecting(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	r := New(4, Guard{}).Get(context.Background(), "http://"+l.Addr().String()+"/", opts())
	if !errors.Is(r.Err, ErrBlocked) || Classify(&r, nil) != Final || !strings.Contains(Describe(&r), "loopback") {
		t.Fatalf("guarded fetch: err %v verdict %v describe %q", r.Err, Classify(&r, nil), Describe(&r))
	}
	l.Close() // ends Accept; a connection that got through would be counted first
	select {
	case <-accepted:
		t.Fatal("the listener accepted a connection")
	default:
	}
}

func TestStalledBodyTimesOut(t *testing.T) {
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html>"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // then nothing more
	})
	o := opts()
	o.IdleTimeout = 100 * time.Millisecond
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), url, o)
	if !errors.Is(r.Err, ErrStalled) || Classify(&r, nil) != Transient || !strings.HasPrefix(Describe(&r), "timeout: ") || !strings.Contains(Describe(&r), "body stalled") {
		t.Fatalf("stalled body: err %v describe %q", r.Err, Describe(&r))
	}
}

// TestReachedByIsNeverBeforeTheHostHadTheRequest: the host may take a
// request in long after it was written, on a new connection as on a
// kept-alive one, so ReachedBy is no earlier than the server's own arrival
// time on either: it is when the answer began.
func TestReachedByIsNeverBeforeTheHostHadTheRequest(t *testing.T) {
	const think = 50 * time.Millisecond
	var mu sync.Mutex
	var arrivals []time.Time
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		time.Sleep(think)
		w.Write([]byte("ok"))
	})
	f := New(4, Guard{AllowPrivate: true})
	first := f.Get(context.Background(), url, opts())
	second := f.Get(context.Background(), url, opts())
	mu.Lock()
	defer mu.Unlock()
	if first.Err != nil || second.Err != nil || len(arrivals) != 2 {
		t.Fatalf("errors %v, %v; %d requests arrived", first.Err, second.Err, len(arrivals))
	}
	if first.ReachedBy.Before(arrivals[0]) {
		t.Fatalf("new connection: reached by %v, but the server had it at %v", first.ReachedBy, arrivals[0])
	}
	if second.ReachedBy.Before(arrivals[1].Add(think)) {
		t.Fatalf("kept-alive connection: reached by %v, but the server began its answer after %v", second.ReachedBy, arrivals[1].Add(think))
	}
}

// TestConditionalGetSendsTheValidators: the validators of the last version
// go out as If-None-Match and If-Modified-Since, and only when given.
func TestConditionalGetSendsTheValidators(t *testing.T) {
	var inm, ims []string
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		inm, ims = append(inm, r.Header.Get("If-None-Match")), append(ims, r.Header.Get("If-Modified-Since"))
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write([]byte("<p>v2</p>"))
	})
	f := New(4, Guard{AllowPrivate: true})
	o := opts()
	o.IfNoneMatch, o.IfModifiedSince = `"v1"`, "Wed, 02 Dec 2026 10:00:00 GMT"
	if r := f.Get(context.Background(), url, o); r.Status != http.StatusNotModified || r.Length != 0 {
		t.Errorf("conditional GET: %d with %d bytes, want 304 and none", r.Status, r.Length)
	}
	if r := f.Get(context.Background(), url, opts()); r.Status != 200 || string(r.Body) != "<p>v2</p>" {
		t.Errorf("plain GET: %d %q", r.Status, r.Body)
	}
	if want := []string{`"v1"`, ""}; !slices.Equal(inm, want) {
		t.Errorf("If-None-Match sent %q, want %q", inm, want)
	}
	if want := []string{"Wed, 02 Dec 2026 10:00:00 GMT", ""}; !slices.Equal(ims, want) {
		t.Errorf("If-Modified-Since sent %q, want %q", ims, want)
	}
}
