package warc

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// wireServer is an HTTP server whose every connection is recorded byte for
// byte, both ways: the ground truth of what it sent, to hold the archive
// against. It is a real net/http server, so chunking, Content-Length and
// keep-alive are the standard library's, not the test's.
type wireServer struct {
	Host string // 127.0.0.1:port
	srv  *http.Server

	mu    sync.Mutex
	conns []*recordedConn
}

type recordedConn struct {
	net.Conn
	mu      sync.Mutex
	in, out bytes.Buffer
}

func (c *recordedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recordedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.out.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

type recordingListener struct {
	net.Listener
	s *wireServer
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recordedConn{Conn: c}
	l.s.mu.Lock()
	l.s.conns = append(l.s.conns, rc)
	l.s.mu.Unlock()
	return rc, nil
}

func startWireServer(t *testing.T, h http.Handler) *wireServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &wireServer{Host: l.Addr().String()}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(recordingListener{l, s}) //nolint:errcheck // ends with Close
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// served is one exchange as the server saw it.
type served struct {
	Path     string // with ?query
	Request  []byte // as read
	Response []byte // as written; cut short if the client hung up
	Header   http.Header
}

// Exchanges splits each connection's recorded bytes into its exchanges,
// by parsing them as an HTTP client and server would.
func (s *wireServer) Exchanges(t *testing.T) []served {
	t.Helper()
	s.mu.Lock()
	conns := append([]*recordedConn(nil), s.conns...)
	s.mu.Unlock()
	var out []served
	for _, c := range conns {
		c.mu.Lock()
		in, sent := bytes.Clone(c.in.Bytes()), bytes.Clone(c.out.Bytes())
		c.mu.Unlock()
		inR, outR := bytes.NewReader(in), bytes.NewReader(sent)
		inB, outB := bufio.NewReader(inR), bufio.NewReader(outR)
		inAt, outAt := 0, 0
		for {
			req, err := http.ReadRequest(inB)
			if err != nil {
				break
			}
			io.Copy(io.Discard, req.Body)
			inEnd := len(in) - inR.Len() - inB.Buffered()
			ex := served{Path: req.URL.RequestURI(), Request: in[inAt:inEnd]}
			inAt = inEnd
			resp, err := http.ReadResponse(outB, req)
			if err != nil {
				t.Errorf("the server's answer to %s does not parse: %v", ex.Path, err)
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			outEnd := len(sent) - outR.Len() - outB.Buffered()
			ex.Response, ex.Header = sent[outAt:outEnd], resp.Header
			outAt = outEnd
			out = append(out, ex)
		}
	}
	return out
}
