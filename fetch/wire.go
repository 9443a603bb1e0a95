package fetch

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// Wire is one exchange as it crossed the connection, for a web archive:
// the bytes themselves, not a rebuilding of them from parsed headers. The
// transport parses a copy; nothing here is normalised.
type Wire struct {
	// Request is the request as written: request line, headers in the
	// order and case sent, the blank line.
	Request []byte
	// Response is the response as read: status line, headers in order and
	// case, and the body with its content coding (gzip stays gzip) and its
	// transfer coding (chunk framing stays) as received. Interim 1xx
	// responses before it are left out.
	Response []byte
	// RemoteIP is the address the connection reached.
	RemoteIP string
	// Truncated is true when Response holds only the first bytes of what
	// the server sent: the body went past the cap, or was not read to its
	// end.
	Truncated bool
}

// tapConn copies a connection's traffic into the capture of the exchange
// using it. A connection serves one exchange at a time (HTTP/1.1, no
// pipelining), so what is written after the capture is attached is its
// request, and what is read its response.
type tapConn struct {
	net.Conn
	mu  sync.Mutex
	cap *capture
}

func (c *tapConn) attach(cp *capture) {
	c.mu.Lock()
	c.cap = cp
	c.mu.Unlock()
	cp.attached(c)
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.cap != nil {
			c.cap.read(c, p[:n])
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.cap != nil {
		c.cap.wrote(c, p)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// capture collects one exchange's bytes, up to limit bytes of response.
type capture struct {
	limit int
	mu    sync.Mutex
	conn  *tapConn // the connection it is on; a retry on another starts afresh
	ip    string
	req   bytes.Buffer
	resp  bytes.Buffer
	over  bool // more response bytes came than limit
	done  bool
}

type captureKey struct{}

func newCapture(limit int64) *capture { return &capture{limit: int(min(limit, 1<<40))} }

// attached starts the capture over on c: the transport may retry a request
// on a fresh connection when a reused one turns out closed.
func (cp *capture) attached(c *tapConn) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.conn, cp.req, cp.resp, cp.over = c, bytes.Buffer{}, bytes.Buffer{}, false
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		cp.ip = a.IP.String()
	}
}

func (cp *capture) wrote(c *tapConn, p []byte) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.conn == c && !cp.done {
		cp.req.Write(p)
	}
}

func (cp *capture) read(c *tapConn, p []byte) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.conn != c || cp.done {
		return
	}
	if room := cp.limit - cp.resp.Len(); len(p) > room {
		p, cp.over = p[:max(room, 0)], true
	}
	cp.resp.Write(p)
}

// finish ends the capture (later traffic on the connection is another
// exchange's) and returns it; complete says the body was read to its end.
func (cp *capture) finish(complete bool) *Wire {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.done = true
	if cp.conn == nil {
		return nil
	}
	return &Wire{
		Request:   bytes.Clone(cp.req.Bytes()),
		Response:  skipInterim(bytes.Clone(cp.resp.Bytes())),
		RemoteIP:  cp.ip,
		Truncated: cp.over || !complete,
	}
}

// skipInterim drops the 1xx responses (103 Early Hints, 100 Continue)
// that come before the final one: the record is of the final response.
func skipInterim(b []byte) []byte {
	for len(b) > 12 && bytes.HasPrefix(b, []byte("HTTP/1.")) && b[9] == '1' && !bytes.HasPrefix(b[9:], []byte("101")) {
		end := bytes.Index(b, []byte("\r\n\r\n"))
		if end < 0 {
			return b
		}
		b = b[end+4:]
	}
	return b
}

// dialTLS is the transport's TLS dial: the handshake done here, so the tap
// sits inside TLS and captures the HTTP bytes, not ciphertext. ALPN offers
// only http/1.1: an archive records HTTP/1.x messages (WARC's
// application/http), and HTTP/2 frames are no such thing, so the crawler
// speaks what it records, as Heritrix and wget do.
func dialTLS(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), roots *x509.CertPool, network, addr string) (net.Conn, error) {
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	tc := tls.Client(raw, &tls.Config{ServerName: host, NextProtos: []string{"http/1.1"}, RootCAs: roots})
	hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, err
	}
	return &tapConn{Conn: tc}, nil
}

const tlsHandshakeTimeout = 10 * time.Second

// errUnknownCoding is a Content-Encoding this package cannot undo: the
// body is archived as received but yields no links.
var errUnknownCoding = errors.New("unknown content coding")

// decoded undoes a response's content codings (RFC 9110 §8.4: listed in
// the order applied), so links are read from the document while the
// archive keeps the bytes as sent. A decoder starts at the first read, so
// an empty body with a Content-Encoding is an empty document.
func decoded(raw io.Reader, contentEncoding string) (io.Reader, error) {
	if contentEncoding == "" {
		return raw, nil
	}
	codings := strings.Split(contentEncoding, ",")
	r := raw
	for i := len(codings) - 1; i >= 0; i-- {
		switch c := strings.ToLower(strings.TrimSpace(codings[i])); c {
		case "", "identity":
		case "gzip", "x-gzip":
			r = &lazyDecoder{src: r, open: func(src io.Reader) (io.Reader, error) { return gzip.NewReader(src) }}
		case "deflate":
			r = &lazyDecoder{src: r, open: func(src io.Reader) (io.Reader, error) { return zlib.NewReader(src) }}
		default:
			return nil, fmt.Errorf("%w %q", errUnknownCoding, c)
		}
	}
	return r, nil
}

// lazyDecoder opens its decoder at the first read.
type lazyDecoder struct {
	src  io.Reader
	open func(io.Reader) (io.Reader, error)
	r    io.Reader
}

func (l *lazyDecoder) Read(p []byte) (int, error) {
	if l.r == nil {
		r, err := l.open(l.src)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.EOF // an empty body
			}
			return 0, err
		}
		l.r = r
	}
	return l.r.Read(p)
}
