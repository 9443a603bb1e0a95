package devstack

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A dev server that dies while starting, as one whose internal port was
// taken does, is started again.
func TestTemporalDiedStartingIsStartedAgain(t *testing.T) {
	real := temporalBin(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "temporal")
	marker := filepath.Join(dir, "died-once")
	// Dies once, the way the CLI does when an internal listener fails.
	body := "#!/bin/sh\nif [ ! -e " + marker + " ]; then : > " + marker + "; echo 'panic: runtime error: invalid memory address' >&2; exit 2; fi\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := StartTemporal(ctx, TemporalOptions{Bin: script, UIPort: -1})
	if err != nil {
		t.Fatalf("a server that died once while starting was not started again: %v", err)
	}
	defer srv.Stop()
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the first start did not run: %v", err)
	}
}

// A server that cannot start says why, after the bounded attempts.
func TestTemporalOnATakenPortSaysWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := StartTemporal(ctx, TemporalOptions{Bin: temporalBin(t), Port: l.Addr().(*net.TCPAddr).Port, UIPort: -1})
	if err == nil {
		srv.Stop()
		t.Fatal("started on a port something else listens on")
	}
	var died *diedStarting
	if !errors.As(err, &died) {
		t.Fatalf("error is not a start-up death: %v", err)
	}
	if !strings.Contains(died.said, "address already in use") {
		t.Fatalf("error does not carry the server's reason: %v", err)
	}
	if !strings.Contains(err.Error(), "attempt 3 of 3") {
		t.Fatalf("error does not count its attempts: %v", err)
	}
}

func temporalBin(t *testing.T) string {
	t.Helper()
	bin, err := FindTemporalBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// A server that fails before its logger is set up prints its error bare:
// the error carries that line.
func TestTemporalBareFailureIsCarried(t *testing.T) {
	script := filepath.Join(t.TempDir(), "temporal")
	body := "#!/bin/sh\necho 'unknown flag: --no-such-flag' >&2\nexit 1\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := StartTemporal(ctx, TemporalOptions{Bin: script, UIPort: -1})
	if err == nil {
		srv.Stop()
		t.Fatal("a server that exited at once started")
	}
	if !strings.Contains(err.Error(), "it said: unknown flag: --no-such-flag") {
		t.Fatalf("error does not carry the server's bare line: %v", err)
	}
}
