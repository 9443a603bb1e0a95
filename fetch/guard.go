package fetch

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
)

// Guard decides which addresses a fetch may connect to. It runs at dial
// time, after DNS, on every address tried, so neither a hostname that
// resolves inward nor a redirect to one gets a connection. The zero value
// refuses every non-public address.
type Guard struct {
	// AllowPrivate lets fetches reach loopback, private, link-local and
	// other non-public addresses: for the dev stack and tests, whose webs
	// live on 127.0.0.0/8.
	AllowPrivate bool
	// Allow lists exceptions that may be reached even when AllowPrivate is
	// off, such as an intranet range a campaign is meant to crawl.
	Allow []netip.Prefix
	// Own are the node's own listen addresses (metrics, bodies, pprof),
	// refused whatever AllowPrivate and Allow say; an unspecified address
	// (a listener on every interface) stands for every address of this
	// machine at its port.
	Own []netip.AddrPort
}

// BlockedError is a connection the guard refused.
type BlockedError struct {
	Addr   netip.Addr
	Reason string
	own    bool // the node's own listener: no flag allows it
}

func (e *BlockedError) Error() string {
	if e.own {
		return fmt.Sprintf("refused to connect to %s: %s; no setting allows a node to fetch from itself", e.Addr, e.Reason)
	}
	return fmt.Sprintf("refused to connect to %s: %s address (nodes reach such addresses only with --allow-private-networks or --allow-network)", e.Addr, e.Reason)
}

// ErrBlocked matches any BlockedError with errors.Is.
var ErrBlocked = errors.New("address blocked")

func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// nonPublic are ranges no public web server uses, beyond what net/netip
// names (loopback, private, link-local, multicast, unspecified).
var nonPublic = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
}

// Check returns a BlockedError for an address the guard refuses.
func (g Guard) Check(a netip.Addr) error {
	a = a.Unmap()
	for _, p := range g.Allow {
		if p.Contains(a) {
			return nil
		}
	}
	if g.AllowPrivate {
		return nil
	}
	var reason string
	switch {
	case a.IsLoopback():
		reason = "loopback"
	case a.IsPrivate():
		reason = "private"
	case a.IsLinkLocalUnicast():
		reason = "link-local" // 169.254.169.254, the cloud metadata service, among them
	case a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
		reason = "multicast"
	case a.IsUnspecified():
		reason = "unspecified"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		reason = "broadcast"
	default:
		for _, r := range nonPublic {
			if r.prefix.Contains(a) {
				reason = r.reason
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return &BlockedError{Addr: a, Reason: reason}
}

// CheckAddrPort is Check for a connection to ap: it also refuses the
// node's own listeners (Own), whatever the rest of the guard allows.
func (g Guard) CheckAddrPort(ap netip.AddrPort) error {
	a := ap.Addr().Unmap()
	for _, own := range g.Own {
		o := own.Addr().Unmap()
		if own.Port() == ap.Port() && (o == a || o.IsUnspecified() && isThisMachine(a)) {
			return &BlockedError{Addr: a, Reason: "this node's own listener (port " + strconv.Itoa(int(ap.Port())) + ")", own: true}
		}
	}
	return g.Check(a)
}

// isThisMachine says whether a is one of this machine's addresses: what a
// listener on every interface answers at.
func isThisMachine(a netip.Addr) bool {
	return a.IsLoopback() || a.IsUnspecified() || slices.Contains(interfaceAddrs(), a)
}

// interfaceAddrs are the machine's interface addresses, read once.
var interfaceAddrs = sync.OnceValue(func() []netip.Addr {
	var out []netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
})

// control is a net.Dialer Control hook: it runs after the address is
// resolved and before connect(2), so a refused address sees no packet.
func (g Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: not an IP address and port", address)
	}
	return g.CheckAddrPort(ap)
}
