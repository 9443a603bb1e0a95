package fetch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeDNS is a DNS server on loopback UDP whose A answers come from answer
// (name without the trailing dot, and how many A queries for that name came
// before, counting from 0). AAAA queries get no records, so only the A
// answer is dialled.
type fakeDNS struct {
	conn   net.PacketConn
	answer func(name string, nth int) netip.Addr
	mu     sync.Mutex
	asked  map[string]int
}

func startFakeDNS(t *testing.T, answer func(name string, nth int) netip.Addr) *fakeDNS {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDNS{conn: conn, answer: answer, asked: map[string]int{}}
	t.Cleanup(func() { conn.Close() })
	go d.serve()
	return d
}

// resolver sends every lookup to this server, whatever resolv.conf says.
func (d *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "udp4", d.conn.LocalAddr().String())
	}}
}

// queries is how many A queries name has had.
func (d *fakeDNS) queries(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[name]
}

func (d *fakeDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return // closed at the end of the test
		}
		if reply := d.reply(buf[:n]); reply != nil {
			_, _ = d.conn.WriteTo(reply, from)
		}
	}
}

// reply answers a one-question query (RFC 1035 §4.1): the header with the
// query's ID, the question echoed, and one A record or none.
func (d *fakeDNS) reply(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if l&0xc0 != 0 || i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	question := q[12 : i+5] // name, its terminating zero, type and class
	qtype := binary.BigEndian.Uint16(q[i+1 : i+3])
	name := strings.ToLower(strings.Join(labels, "."))

	var answer netip.Addr
	if qtype == 1 { // A
		d.mu.Lock()
		nth := d.asked[name]
		d.asked[name]++
		d.mu.Unlock()
		answer = d.answer(name, nth)
	}
	out := make([]byte, 12, 12+len(question)+16)
	copy(out[0:2], q[0:2])                       // ID
	binary.BigEndian.PutUint16(out[2:4], 0x8180) // a response, recursion desired and available, no error
	binary.BigEndian.PutUint16(out[4:6], 1)      // one question
	out = append(out, question...)
	if answer.Is4() {
		binary.BigEndian.PutUint16(out[6:8], 1) // one answer
		out = append(out, 0xc0, 12)             // its name: a pointer to the question's
		out = binary.BigEndian.AppendUint16(out, 1)
		out = binary.BigEndian.AppendUint16(out, 1)
		out = binary.BigEndian.AppendUint32(out, 0) // TTL 0: nothing may cache it
		out = binary.BigEndian.AppendUint16(out, 4)
		a4 := answer.As4()
		out = append(out, a4[:]...)
	}
	return out
}

// countingListener is a loopback listener that counts the connections that
// reach it.
func countingListener(t *testing.T) (net.Listener, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l, &n
}

// TestGuardRefusesNamesThatResolveInward: a hostname, not an address,
// that resolves to loopback, a private range or the metadata service is
// refused, naming the address it resolved to, and the loopback listener
// behind one of them never sees a connection. The guard judges the
// address the dialer resolved, so a name is no way round it.
func TestGuardRefusesNamesThatResolveInward(t *testing.T) {
	l, accepted := countingListener(t)
	port := l.Addr().(*net.TCPAddr).Port
	dns := startFakeDNS(t, func(name string, _ int) netip.Addr {
		switch name {
		case "loopback.test":
			return netip.MustParseAddr("127.0.0.1")
		case "private.test":
			return netip.MustParseAddr("10.1.2.3")
		case "home.test":
			return netip.MustParseAddr("192.168.0.10")
		case "metadata.test":
			return netip.MustParseAddr("169.254.169.254")
		}
		return netip.Addr{}
	})
	f := New(4, Guard{})
	f.dialer.Resolver = dns.resolver()
	for name, reason := range map[string]string{
		"loopback.test": "127.0.0.1: loopback", "private.test": "10.1.2.3: private",
		"home.test": "192.168.0.10: private", "metadata.test": "169.254.169.254: link-local",
	} {
		u := "http://" + net.JoinHostPort(name, strconv.Itoa(port)) + "/"
		r := f.Get(context.Background(), u, opts())
		if !errors.Is(r.Err, ErrBlocked) || Classify(&r, nil) != Final || !strings.Contains(Describe(&r), reason) {
			t.Errorf("%s: err %v, verdict %v, describe %q; want refused as %q", u, r.Err, Classify(&r, nil), Describe(&r), reason)
		}
		if dns.queries(name) == 0 {
			t.Errorf("%s was never looked up: the test proves nothing about names", name)
		}
	}
	// localhost through the system's own resolver (/etc/hosts), as a node
	// would look it up.
	r := New(4, Guard{}).Get(context.Background(), "http://"+net.JoinHostPort("localhost", strconv.Itoa(port))+"/", opts())
	if !errors.Is(r.Err, ErrBlocked) || !strings.Contains(Describe(&r), "loopback") {
		t.Errorf("localhost: err %v, describe %q; want refused as loopback", r.Err, Describe(&r))
	}
	l.Close() // a connection that got through was counted before Accept ends
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the loopback listener accepted %d connections", n)
	}
}

// TestGuardJudgesTheAddressItDials is DNS rebinding: a name answers a
// harmless address to its first lookup and an inward one to the next. A
// guard that looked the name up, judged the answer and then let the
// dialer look it up again would connect inward on the second answer; this
// guard judges the address the connection is made to, so the first fetch
// goes to the harmless address and the second is refused.
func TestGuardJudgesTheAddressItDials(t *testing.T) {
	l, accepted := countingListener(t)
	port := l.Addr().(*net.TCPAddr).Port
	harmless := netip.MustParseAddr("127.0.0.2") // stands for a public address: allowed below, nothing listens
	dns := startFakeDNS(t, func(name string, nth int) netip.Addr {
		if name != "rebind.test" {
			return netip.Addr{}
		}
		if nth == 0 {
			return harmless
		}
		return netip.MustParseAddr("127.0.0.1")
	})
	f := New(4, Guard{Allow: []netip.Prefix{netip.PrefixFrom(harmless, 32)}})
	f.dialer.Resolver = dns.resolver()
	u := "http://" + net.JoinHostPort("rebind.test", strconv.Itoa(port)) + "/"

	first := f.Get(context.Background(), u, opts())
	if first.Err == nil || errors.Is(first.Err, ErrBlocked) || !strings.Contains(first.Err.Error(), harmless.String()) {
		t.Errorf("first fetch: err %v; want a refused connection to %s, the first answer", first.Err, harmless)
	}
	second := f.Get(context.Background(), u, opts())
	if !errors.Is(second.Err, ErrBlocked) || !strings.Contains(Describe(&second), "127.0.0.1: loopback") {
		t.Errorf("second fetch: err %v, describe %q; want refused as 127.0.0.1: loopback", second.Err, Describe(&second))
	}
	if n := dns.queries("rebind.test"); n != 2 {
		t.Errorf("rebind.test had %d A queries, want one per fetch", n)
	}
	l.Close()
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the loopback listener accepted %d connections after the name rebound to it", n)
	}
}

// TestGuardRefusesTheNodesOwnListeners: whatever the allow-list or
// --allow-private-networks say, a fetch never reaches one of the node's
// own listeners (its metrics, bodies and pprof): not at the address it
// is bound to, nor, for a listener on every interface, at loopback with
// its port. Other services on the same addresses stay reachable.
func TestGuardRefusesTheNodesOwnListeners(t *testing.T) {
	own, ownAccepted := countingListener(t)
	defer own.Close()
	every, err := net.Listen("tcp", ":0") // a listener on every interface
	if err != nil {
		t.Fatal(err)
	}
	defer every.Close()
	web := serve(t, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for name, g := range map[string]Guard{
		"allow-network 127.0.0.0/8": {Allow: loopback},
		"allow-private-networks":    {AllowPrivate: true},
	} {
		g.Own = []netip.AddrPort{own.Addr().(*net.TCPAddr).AddrPort(), every.Addr().(*net.TCPAddr).AddrPort()}
		f := New(4, g)
		everyPort := every.Addr().(*net.TCPAddr).Port
		for _, u := range []string{"http://" + own.Addr().String() + "/metrics", fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", everyPort)} {
			if r := f.Get(context.Background(), u, opts()); !errors.Is(r.Err, ErrBlocked) {
				t.Errorf("%s: fetching the node's own %s: err %v, want refused", name, u, r.Err)
			}
		}
		if r := f.Get(context.Background(), web, opts()); r.Err != nil {
			t.Errorf("%s: fetching another loopback web %s: %v", name, web, r.Err)
		}
	}
	own.Close()
	if n := ownAccepted.Load(); n != 0 {
		t.Fatalf("the node's own listener accepted %d connections", n)
	}
}
