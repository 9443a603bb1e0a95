package devstack

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// A port FreePort gave sits in TIME_WAIT, so bind(:0) (the dev server's own
// picks, other test packages') does not hand it out again, yet it can be
// listened on at once.
func TestFreePortIsHeldInTimeWait(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if !inTimeWait(t, port) {
		t.Fatalf("port %d is not in TIME_WAIT: bind(:0) may hand it out again", port)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("listen on the port FreePort gave: %v", err)
	}
	l.Close()
}

// inTimeWait reads /proc/net/tcp for a socket on 127.0.0.1:port in state
// 06 (TIME_WAIT).
func inTimeWait(t *testing.T, port int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == local && f[3] == "06" {
			return true
		}
	}
	return false
}
