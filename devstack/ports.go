package devstack

import (
	"fmt"
	"net"
)

// FreePort asks the kernel for a free TCP port on 127.0.0.1 and keeps the
// kernel from handing it out again for a while.
//
// A port that is merely listened on and closed can come straight back from
// the next bind to port 0, in this process or another. The temporal dev
// server picks its internal services' ports that way after we pick its
// frontend port, and a parallel test package picks its own: a repeat
// makes one listener fail and the server die during start-up. So, as the
// temporal CLI's own picker does, a connection is accepted and closed from
// the listening side first. That leaves the port in TIME_WAIT (60 s on
// Linux), during which bind(:0) skips it, while a server that sets
// SO_REUSEADDR (Go's listeners and Postgres do) can still bind it.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	addr := l.Addr().(*net.TCPAddr)
	c, err := net.DialTCP("tcp", nil, addr)
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	if err := s.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return addr.Port, nil
}
