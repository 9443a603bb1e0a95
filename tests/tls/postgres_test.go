package tlstest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// tlsPostgres is a throwaway cluster with ssl=on, its certificate signed
// by ca for 127.0.0.1 only (no host name), so verify-full has something
// to check.
func tlsPostgres(t *testing.T, ca *authority) *devstack.Postgres {
	t.Helper()
	cert := ca.issue("postgres", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	// The server reads its key as its own user, and wants it private: a
	// directory of its own, outside the test's (which it cannot enter).
	dir, err := os.MkdirTemp("", "spiderpool-pgtls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	crt, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(crt, cert.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, cert.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // devstack runs the server as postgres then
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, crt, key} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{
		Settings: []string{"ssl=on", "ssl_cert_file=" + crt, "ssl_key_file=" + key},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	return pg
}

// pgURL is the URL of database postgres on host, with sslmode and the CA
// file given.
func pgURL(host string, pg *devstack.Postgres, mode, caFile string) string {
	return fmt.Sprintf("postgres://%s@%s:%d/postgres?sslmode=%s&sslrootcert=%s", devstack.PostgresUser, host, pg.Port(), mode, caFile)
}

// Postgres TLS is DATABASE_URL's business (sslmode=verify-full,
// sslrootcert): the store connects over TLS to a server whose certificate
// its CA signed, and refuses one it did not, or one for another host,
// with errors that say so and where.
func TestPostgresVerifyFullRefusesWrongCAOrHost(t *testing.T) {
	ca := newAuthority(t, "postgres-test")
	pg := tlsPostgres(t, ca)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()

	st, err := store.Open(ctx, pgURL("127.0.0.1", pg, "verify-full", ca.CAFile), 2, 10*time.Second)
	if err != nil {
		t.Fatalf("verify-full with the right CA: %v", err)
	}
	var ssl bool
	var version string
	err = st.Pool().QueryRow(ctx, `SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl, &version)
	st.Close()
	if err != nil || !ssl {
		t.Fatalf("connection not encrypted: ssl %v (%s), err %v", ssl, version, err)
	}

	other := newAuthority(t, "some-other-ca")
	where := fmt.Sprintf("cannot reach Postgres at 127.0.0.1:%d/postgres", pg.Port())
	_, err = store.Open(ctx, pgURL("127.0.0.1", pg, "verify-full", other.CAFile), 2, 10*time.Second)
	var unknownCA x509.UnknownAuthorityError
	if !errors.As(err, &unknownCA) || !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), "tls") {
		t.Errorf("verify-full with another CA: err = %v, want x509.UnknownAuthorityError, naming TLS and %q", err, where)
	}
	t.Logf("another CA: %v", err)

	// verify-full checks the name too: the certificate is for 127.0.0.1,
	// not localhost; verify-ca checks only the CA.
	_, err = store.Open(ctx, pgURL("localhost", pg, "verify-full", ca.CAFile), 2, 10*time.Second)
	var hostname x509.HostnameError
	if !errors.As(err, &hostname) {
		t.Errorf("verify-full to localhost with a certificate for 127.0.0.1: err = %v, want x509.HostnameError", err)
	}
	if st, err := store.Open(ctx, pgURL("localhost", pg, "verify-ca", ca.CAFile), 2, 10*time.Second); err != nil {
		t.Errorf("verify-ca to localhost: %v", err)
	} else {
		st.Close()
	}
}

// `spiderpool migrate` takes the same DATABASE_URL: it migrates over TLS,
// and a wrong CA ends it with an error naming the server.
func TestMigrateRunsOverTLSAndRefusesAWrongCA(t *testing.T) {
	ca := newAuthority(t, "postgres-test")
	pg := tlsPostgres(t, ca)
	bin := harness.Binary(t)
	run := func(url string) (int, string) {
		cmd := exec.Command(bin, "migrate")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		r := harness.RunCommand(t, time.Minute, cmd)
		return r.Code, r.Stderr
	}
	if code, stderr := run(pgURL("127.0.0.1", pg, "verify-full", ca.CAFile)); code != 0 {
		t.Fatalf("migrate over verify-full: exit %d: %s", code, stderr)
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	st, err := store.Open(ctx, pgURL("127.0.0.1", pg, "verify-full", ca.CAFile), 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var applied int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied); err != nil || applied == 0 {
		t.Fatalf("after migrate: %d migrations recorded, err %v", applied, err)
	}

	other := newAuthority(t, "some-other-ca")
	code, stderr := run(pgURL("127.0.0.1", pg, "verify-full", other.CAFile))
	where := fmt.Sprintf("cannot reach Postgres at 127.0.0.1:%d/postgres", pg.Port())
	if code == 0 || !strings.Contains(stderr, where) || !strings.Contains(stderr, "certificate signed by unknown authority") {
		t.Errorf("migrate with another CA: exit %d, stderr %q; want a failure naming %q and the unknown authority", code, stderr, where)
	}
}
