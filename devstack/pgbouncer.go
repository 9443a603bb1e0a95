package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgBouncer defaults: a server pool a stock Postgres (max_connections =
// 100) holds beside Temporal and an admin, and clients for 250 nodes of 16
// connections each.
const (
	DefaultPgBouncerPoolSize   = 40
	DefaultPgBouncerMaxClients = 4000
)

// PgBouncerOptions configure a PgBouncer in transaction pooling mode in
// front of one Postgres.
type PgBouncerOptions struct {
	// Port on 127.0.0.1; 0 picks a free one.
	Port int
	// Upstream is the Postgres it fronts.
	Upstream Upstream
	// PoolSize is how many server connections it opens per database
	// (default_pool_size; every client logs in as Upstream.User, so
	// there is one pool per database). 0 means DefaultPgBouncerPoolSize.
	PoolSize int
	// MaxClients is how many client connections it accepts at once
	// (max_client_conn). 0 means DefaultPgBouncerMaxClients.
	MaxClients int
	// Output receives its log; nil discards it.
	Output io.Writer
	// Dir holds its configuration. Empty means a new temporary directory,
	// removed by Stop.
	Dir string
}

// Upstream is where a PgBouncer sends its server connections.
type Upstream struct {
	Host string
	Port int
	// Database is the one database served, under its own name; empty
	// serves every database of the server, each under its own name.
	Database string
	// User every server connection logs in as, whatever user the
	// client names; Password is its password, if the server asks.
	User, Password string
}

// UpstreamOf is the server a database URL names, for a PgBouncer to
// front it: that database only, as the URL's user.
func UpstreamOf(url string) (Upstream, error) {
	c, err := pgconn.ParseConfig(url)
	if err != nil {
		return Upstream{}, fmt.Errorf("database URL to front with PgBouncer: %w", err)
	}
	return Upstream{Host: c.Host, Port: int(c.Port), Database: c.Database, User: c.User, Password: c.Password}, nil
}

// PgBouncer is a running PgBouncer.
type PgBouncer struct {
	opts PgBouncerOptions
	cmd  *exec.Cmd
	done chan error
	temp bool // Dir is ours to remove
}

// FindPgBouncer returns the pgbouncer binary: from PATH, else where the
// Debian package puts it (/usr/sbin, which is not in every user's PATH).
func FindPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("no PgBouncer found: pgbouncer is not in PATH or " + debian +
		"; install the Debian package pgbouncer (make test-tools does)")
}

// StartPgBouncer writes a configuration for opts and starts PgBouncer,
// waiting until it serves a connection to the upstream. It dies with this
// process.
func StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (*PgBouncer, error) {
	bin, err := FindPgBouncer()
	if err != nil {
		return nil, err
	}
	if opts.Port == 0 {
		if opts.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = DefaultPgBouncerPoolSize
	}
	if opts.MaxClients == 0 {
		opts.MaxClients = DefaultPgBouncerMaxClients
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if opts.Upstream.User == "" {
		return nil, errors.New("pgbouncer: the upstream names no user to log in as")
	}
	b := &PgBouncer{opts: opts}
	if opts.Dir == "" {
		if opts.Dir, err = os.MkdirTemp("", "spiderpool-pgbouncer-"); err != nil {
			return nil, fmt.Errorf("pgbouncer dir: %w", err)
		}
		b.temp = true
	}
	if b.opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("pgbouncer dir: %w", err)
	}
	ini, err := b.writeConfig()
	if err != nil {
		_ = b.removeTemp()
		return nil, err
	}
	cmd := exec.Command(bin, ini)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// PgBouncer refuses to run as root, as Postgres does.
	if os.Geteuid() == 0 {
		cred, err := credentialOf("postgres")
		if err != nil {
			_ = b.removeTemp()
			return nil, fmt.Errorf("running as root, PgBouncer needs an unprivileged user: %w", err)
		}
		if err := handOver(b.opts.Dir, cred); err != nil {
			_ = b.removeTemp()
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
	}
	// SIGTERM is an immediate shutdown for PgBouncer: a pooler keeps no
	// state worth a wait.
	DieWithParent(cmd, syscall.SIGTERM)
	head := &headWriter{max: 16 << 10}
	out := io.MultiWriter(opts.Output, head)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = b.removeTemp()
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	b.cmd = cmd
	b.done = make(chan error, 1)
	go func() { b.done <- cmd.Wait() }()
	if err := b.waitReady(ctx); err != nil {
		if b.cmd == nil { // it died
			err = fmt.Errorf("%w; it said: %s", err, head.failures())
		}
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// writeConfig writes pgbouncer.ini and its userlist.txt into Dir and
// returns the ini's path.
func (b *PgBouncer) writeConfig() (string, error) {
	up := b.opts.Upstream
	for what, v := range map[string]string{"host": up.Host, "database": up.Database, "user": up.User} {
		if strings.ContainsAny(v, "'\\\n\r") {
			return "", fmt.Errorf("pgbouncer: upstream %s %q has a quote, backslash or newline, which pgbouncer.ini cannot hold", what, v)
		}
	}
	if strings.ContainsAny(up.Password, "\n\r") {
		return "", errors.New("pgbouncer: the upstream password has a newline, which userlist.txt cannot hold")
	}
	// "*" serves every database under its own name; PgBouncer 1.18 reads
	// no quoted names, so a database named otherwise is served that way.
	name, server := "*", ""
	if plainName.MatchString(up.Database) {
		name, server = up.Database, " dbname="+up.Database
	}
	port := up.Port
	if port == 0 {
		port = 5432
	}
	// JIT off as store.Open asks for it: pgx sends jit as a startup
	// parameter, which PgBouncer cannot pass on (it is ignored below), so
	// every server connection sets it once it is opened.
	databases := fmt.Sprintf("%s = host='%s' port=%d user='%s'%s connect_query='SET jit = off'\n",
		name, up.Host, port, up.User, server)
	users := filepath.Join(b.opts.Dir, "userlist.txt")
	// The password of the user PgBouncer logs in as (none for a trust
	// server); clients are not asked for one (auth_type any, below).
	userlist := quoteUserlist(up.User) + " " + quoteUserlist(up.Password) + "\n"
	ini := filepath.Join(b.opts.Dir, "pgbouncer.ini")
	conf := "[databases]\n" + databases + `
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ` + strconv.Itoa(b.opts.Port) + `
unix_socket_dir =
; Clients are this machine's processes, as for the dev cluster's trust auth;
; server connections log in as the database entry's user.
auth_type = any
auth_file = ` + users + `
pool_mode = transaction
default_pool_size = ` + strconv.Itoa(b.opts.PoolSize) + `
max_client_conn = ` + strconv.Itoa(b.opts.MaxClients) + `
; pgx sends extra_float_digits, and jit from store.Open; PgBouncer would
; refuse a client whose startup names a parameter it cannot track.
ignore_startup_parameters = extra_float_digits,jit
listen_backlog = 4096
server_tls_sslmode = prefer
log_connections = 0
stats_users = ` + up.User + `
log_disconnections = 0
`
	if err := os.WriteFile(users, []byte(userlist), 0o600); err != nil {
		return "", fmt.Errorf("pgbouncer userlist: %w", err)
	}
	if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
		return "", fmt.Errorf("pgbouncer config: %w", err)
	}
	return ini, nil
}

// plainName is a database name pgbouncer.ini takes unquoted.
var plainName = regexp.MustCompile(`^[_0-9A-Za-z]+$`)

// quoteUserlist quotes a userlist.txt field: in double quotes, doubled
// within, its only escape.
func quoteUserlist(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func (b *PgBouncer) waitReady(ctx context.Context) error {
	db := b.opts.Upstream.Database
	if db == "" {
		db = "postgres"
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, b.URL(db))
		if err == nil {
			// A server connection answers: the upstream is reachable too.
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case werr := <-b.done:
			b.cmd = nil
			return fmt.Errorf("pgbouncer on port %d exited during start-up: %v", b.opts.Port, werr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer on port %d not serving %s:%d/%s after 30s: %w", b.opts.Port, b.opts.Upstream.Host, b.opts.Upstream.Port, db, err)
		}
	}
}

// Port is the TCP port on 127.0.0.1.
func (b *PgBouncer) Port() int { return b.opts.Port }

// PoolSize is the server connections it opens at most per database.
func (b *PgBouncer) PoolSize() int { return b.opts.PoolSize }

// URL is the connection string of database db through PgBouncer. It asks
// pgx for unnamed statements (default_query_exec_mode=cache_describe):
// PgBouncer 1.18 in transaction mode cannot keep a named prepared
// statement, pgx's default, on the server connection that prepared it.
// pgx takes the parameter for itself and sends nothing of it.
func (b *PgBouncer) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(b.opts.Upstream.User), Host: "127.0.0.1:" + strconv.Itoa(b.opts.Port),
		Path: "/" + db, RawQuery: "sslmode=disable&default_query_exec_mode=cache_describe"}
	return u.String()
}

// Stop shuts PgBouncer down (safe shutdown: transactions under way end
// first) and waits for it, killing it after 10 s.
func (b *PgBouncer) Stop() error {
	if b.cmd != nil {
		_ = b.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		b.cmd = nil
	}
	return b.removeTemp()
}

func (b *PgBouncer) removeTemp() error {
	if !b.temp {
		return nil
	}
	b.temp = false
	return os.RemoveAll(b.opts.Dir)
}
