package cli

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestCommandsFailFastWithoutServers: with Postgres or Temporal out of
// reach, a command gives up by itself within its connect timeout (5s by
// default) and says what it tried to reach. Out of reach comes in four
// kinds, each proving something else:
//   - refused: a closed port; the error must name the address.
//   - mute: a listener that accepts TCP and never says a word; proves the
//     protocol steps (gRPC's handshake, Postgres's startup) are bounded,
//     not only the TCP connect.
//   - dropping: a listener whose accept queue is full, so the kernel drops
//     every SYN; proves the TCP connect itself is bounded, as against a
//     firewalled host.
//   - TEST-NET-1 (192.0.2.1): an address no server has. On most networks
//     its packets vanish (a blackhole); on one that routes it somewhere
//     (a gateway refusing, a proxy answering nonsense) it proves only that
//     whatever comes back ends in an error naming the address.
//
// The deadline is a bound on the wait, a dozen connect timeouts: a command
// that hangs is killed there and fails the test; no speed is asserted.
func TestCommandsFailFastWithoutServers(t *testing.T) {
	refused := closedAddr(t)
	mute := silentAddr(t)
	dropping := droppingListener(t)
	const blackhole = "192.0.2.1"
	pg := func(hostport string) string {
		return "postgres://spiderpool@" + hostport + "/spiderpool?sslmode=disable"
	}
	s := harness.NewStack(t) // a live Postgres, to show the Temporal check on its own
	type tc struct {
		name  string
		args  []string
		wants []string
	}
	cases := []tc{
		{"worker without postgres", []string{"worker", "--node", "x", "--database-url", pg(refused)},
			[]string{"cannot reach Postgres at " + refused, "from --flag"}},
		{"worker without temporal", []string{"worker", "--node", "x", "--database-url", s.Config.DatabaseURL, "--temporal-address", refused},
			[]string{"cannot reach Temporal at " + refused}},
		{"worker with a mute temporal", []string{"worker", "--node", "x", "--database-url", s.Config.DatabaseURL, "--temporal-address", mute},
			[]string{"cannot reach Temporal at " + mute, "no answer within 5s (--connect-timeout)"}},
	}
	for _, where := range []struct{ kind, addr string }{
		{"refused", refused}, {"mute", mute}, {"dropping", dropping}, {"TEST-NET", blackhole + ":5432"},
	} {
		cases = append(cases, tc{"migrate, postgres " + where.kind, []string{"migrate", "--database-url", pg(where.addr)},
			[]string{"cannot reach Postgres at " + where.addr}})
	}
	for _, where := range []struct{ kind, addr string }{
		{"refused", refused}, {"mute", mute}, {"dropping", dropping}, {"TEST-NET", blackhole + ":7233"},
	} {
		wants := []string{"cannot reach Temporal at " + where.addr, "namespace default"}
		if where.kind == "mute" || where.kind == "dropping" {
			wants = append(wants, "no answer within 5s (--connect-timeout)")
		}
		cases = append(cases, tc{"status, temporal " + where.kind, []string{"campaign", "status", "any", "--temporal-address", where.addr}, wants})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each mostly waits out its connect timeout
			r := spiderpool(t, "", c.args...)
			if r.Code == 0 {
				t.Errorf("exit 0")
			}
			for _, w := range c.wants {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("stderr %q lacks %q", r.Stderr, w)
				}
			}
			// The figure goes in the report.
			t.Logf("failed in %v: %s", r.Took.Round(time.Millisecond), strings.TrimSpace(r.Stderr))
		})
	}
}

// droppingListener is a loopback port whose SYNs the kernel drops: a
// socket listening with a backlog of 0 that never accepts, its queue
// filled by one connection. Linux drops a SYN to a listener whose accept
// queue is full instead of refusing it, so a connect there hangs as one to
// a blackholed host does. The probe checks that it does.
func droppingListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	filler, err := net.DialTimeout("tcp4", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("fill the accept queue of %s: %v", addr, err)
	}
	t.Cleanup(func() { filler.Close() })
	probe, err := net.DialTimeout("tcp4", addr, time.Second)
	var ne net.Error
	if err == nil {
		probe.Close()
		t.Fatalf("%s accepted a second connection: it does not drop SYNs here, so the test would prove nothing", addr)
	} else if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("probe of %s: %v; want a connect that times out", addr, err)
	}
	return addr
}
