package fetch

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// rawServer answers each path with canned bytes, exactly as given, on
// keep-alive connections: what the server sent is known to the byte.
type rawServer struct {
	addr     string
	accepted atomic.Int32
	mu       sync.Mutex
	requests [][]byte // each request as read
}

func serveRaw(t *testing.T, answers map[string][]byte) *rawServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &rawServer{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					var dump bytes.Buffer
					req.Write(&dump)
					s.mu.Lock()
					s.requests = append(s.requests, dump.Bytes())
					s.mu.Unlock()
					if _, err := c.Write(answers[req.URL.Path]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func gzipBytes(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}

// chunked frames body as chunks of n bytes.
func chunked(body []byte, n int) []byte {
	var b bytes.Buffer
	for len(body) > 0 {
		k := min(n, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", k, body[:k])
		body = body[k:]
	}
	b.WriteString("0\r\n\r\n")
	return b.Bytes()
}

const page = `<html><head><title>t</title></head><body><a href="/x">x</a></body></html>`

func TestWireKeepsTheBytesAsSentAndDecodesBeside(t *testing.T) {
	gz := gzipBytes(page)
	answers := map[string][]byte{
		// Header case and order as a server chose them, gzip inside chunks.
		"/gz":    append([]byte("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nX-Zed: 1\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"), chunked(gz, 7)...),
		"/plain": []byte("HTTP/1.1 200 Fine\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"),
		// An interim response first: the record is of the final one.
		"/hints": []byte("HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
	}
	srv := serveRaw(t, answers)
	f := New(4, Guard{AllowPrivate: true})
	o := opts()
	o.Capture, o.MaxBodyBytes = true, 1<<20
	for _, path := range []string{"/gz", "/plain", "/hints"} {
		r := f.Get(context.Background(), "http://"+srv.addr+path, o)
		if r.Err != nil || r.Wire == nil {
			t.Fatalf("%s: err %v wire %v", path, r.Err, r.Wire)
		}
		want := answers[path]
		if path == "/hints" {
			want = want[bytes.Index(want, []byte("HTTP/1.1 200")):]
		}
		if !bytes.Equal(r.Wire.Response, want) {
			t.Errorf("%s: captured\n%q\nwant the bytes sent\n%q", path, r.Wire.Response, want)
		}
		if r.Wire.Truncated || r.Wire.RemoteIP != "127.0.0.1" {
			t.Errorf("%s: truncated %v remote IP %q", path, r.Wire.Truncated, r.Wire.RemoteIP)
		}
		if !bytes.HasPrefix(r.Wire.Request, []byte("GET "+path+" HTTP/1.1\r\nHost: "+srv.addr+"\r\n")) ||
			!bytes.Contains(r.Wire.Request, []byte("\r\nAccept-Encoding: gzip\r\n")) || !bytes.HasSuffix(r.Wire.Request, []byte("\r\n\r\n")) {
			t.Errorf("%s: request captured as %q", path, r.Wire.Request)
		}
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("%d connections for three requests; the test wants them on one kept-alive connection", n)
	}
	r := f.Get(context.Background(), "http://"+srv.addr+"/gz", o)
	sum := sha256.Sum256([]byte(page))
	if string(r.Body) != page || r.Digest != "sha256:"+hex.EncodeToString(sum[:]) || r.Length != int64(len(page)) {
		t.Errorf("decoded body %q digest %s length %d; want the page, its digest and length after decoding", r.Body, r.Digest, r.Length)
	}
	if r.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("Content-Encoding %q: the header must stay as received", r.Header.Get("Content-Encoding"))
	}
}

func TestWireOfABodyPastTheCapIsMarkedTruncated(t *testing.T) {
	body := strings.Repeat("a", 5000)
	answer := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	srv := serveRaw(t, map[string][]byte{"/big": answer})
	o := opts()
	o.Capture, o.MaxBodyBytes = true, 1000
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), "http://"+srv.addr+"/big", o)
	if !r.Truncated || r.Wire == nil || !r.Wire.Truncated {
		t.Fatalf("truncated %v wire %+v; want both truncated", r.Truncated, r.Wire)
	}
	if !bytes.HasPrefix(answer, r.Wire.Response) || len(r.Wire.Response) < 1000 {
		t.Errorf("captured %d bytes, not a prefix of what was sent at least the cap long", len(r.Wire.Response))
	}
}

func TestWireWithoutCaptureIsNil(t *testing.T) {
	srv := serveRaw(t, map[string][]byte{"/": []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")})
	r := New(4, Guard{AllowPrivate: true}).Get(context.Background(), "http://"+srv.addr+"/", opts())
	if r.Err != nil || r.Wire != nil {
		t.Fatalf("err %v wire %v; want no capture unless asked", r.Err, r.Wire)
	}
}

func TestWireOverTLSIsThePlainHTTP(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("X-Proto", r.Proto)
		fmt.Fprint(w, page)
	}))
	srv.EnableHTTP2 = true // offered; the crawler still asks for HTTP/1.1
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f := New(4, Guard{AllowPrivate: true})
	f.roots = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	o := opts()
	o.Capture, o.MaxBodyBytes = true, 1<<20
	r := f.Get(context.Background(), srv.URL+"/", o)
	if r.Err != nil || r.Wire == nil {
		t.Fatalf("err %v wire %v", r.Err, r.Wire)
	}
	if !bytes.HasPrefix(r.Wire.Response, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(r.Wire.Response, []byte(page)) ||
		r.Header.Get("X-Proto") != "HTTP/1.1" || string(r.Body) != page {
		t.Fatalf("captured %q (server saw %s); want the HTTP/1.1 response in clear", r.Wire.Response, r.Header.Get("X-Proto"))
	}
}
