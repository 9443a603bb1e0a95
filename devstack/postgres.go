// Package devstack runs spiderpool as local child processes for `spiderpool
// dev`, `make demo`, the integration tests and the benchmarks: its
// dependencies (a private throwaway Postgres cluster, PgBouncer in front of
// it, the Temporal CLI's dev server with its Web UI) and its own node
// processes (StartNode). Children die with the process that started them.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresOptions configure a throwaway cluster.
type PostgresOptions struct {
	// Dir holds the cluster; it is created, and reused if it already holds
	// one. Empty means a new temporary directory, removed by Stop.
	Dir string
	// Port on 127.0.0.1; 0 picks a free one.
	Port int
	// Output receives the server's log; nil discards it.
	Output io.Writer
	// Settings are more server settings, name=value each (for example
	// shared_preload_libraries=pg_stat_statements, for a benchmark).
	Settings []string
	// MaxConnections is the server's max_connections. 0 means
	// DefaultMaxConnections, room for the many stores a test binary
	// opens; the dev stack asks for a stock server's 100.
	MaxConnections int
}

// DefaultMaxConnections is a throwaway cluster's max_connections unless
// PostgresOptions say otherwise.
const DefaultMaxConnections = 300

// Postgres is a running private cluster with trust auth on loopback.
type Postgres struct {
	opts PostgresOptions
	bin  string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan error
	temp bool // Dir is ours to remove
}

// PostgresUser is the superuser of dev clusters.
const PostgresUser = "spiderpool"

// FindPostgresBin returns the directory holding initdb and postgres: from
// PATH, else the newest /usr/lib/postgresql/*/bin.
func FindPostgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no Postgres server found: initdb is not in PATH or /usr/lib/postgresql/*/bin; " +
		"install the Debian package postgresql (make tools does), or set DATABASE_URL to a server")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// StartPostgres initialises (if needed) and starts a cluster, waiting until
// it accepts connections.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	bin, err := FindPostgresBin()
	if err != nil {
		return nil, err
	}
	if opts.Port == 0 {
		if opts.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	p := &Postgres{opts: opts, bin: bin}
	if opts.Dir == "" {
		if opts.Dir, err = os.MkdirTemp("", "spiderpool-pg-"); err != nil {
			return nil, fmt.Errorf("postgres dir: %w", err)
		}
		p.temp = true
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	p.opts.Dir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("postgres dir: %w", err)
	}
	// Postgres refuses to run as root; run it as the postgres user then.
	if os.Geteuid() == 0 {
		if p.cred, err = credentialOf("postgres"); err != nil {
			return nil, fmt.Errorf("running as root, Postgres needs an unprivileged user: %w", err)
		}
		if err := handOver(dir, p.cred); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		initdb := p.command(ctx, "initdb", "-D", dir, "-U", PostgresUser, "--auth=trust", "-E", "UTF8",
			"--locale=C", "--no-sync", "--no-instructions")
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb %s: %w\n%s", dir, err, out)
		}
	}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Postgres) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func (p *Postgres) start(ctx context.Context) error {
	// A throwaway cluster trades durability for speed: fsync off. It still
	// survives a clean restart, which the chaos tests use. Its databases
	// are new: a campaign's frontier grows from nothing to tens of
	// thousands of rows in seconds, and until autovacuum analyzes it the
	// lease plans for an empty table. Autovacuum looks every 2 s, not
	// every minute: 48 nodes on a new database crawled at 0.86 to 0.87 of
	// the bound in half their runs (leases of 0.5 to 1.9 s for the first
	// 40 s), at 0.894 to 0.908 in three runs with it (docs/postgres.md).
	cmd := p.command(context.WithoutCancel(ctx), "postgres", "-D", p.opts.Dir, "-p", strconv.Itoa(p.opts.Port),
		"-k", p.opts.Dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections="+strconv.Itoa(p.opts.MaxConnections),
		"-c", "shared_buffers=256MB", "-c", "log_min_messages=warning", "-c", "autovacuum_naptime=2s")
	for _, kv := range p.opts.Settings {
		cmd.Args = append(cmd.Args, "-c", kv)
	}
	DieWithParent(cmd, syscall.SIGQUIT)
	cmd.Stdout, cmd.Stderr = p.opts.Output, p.opts.Output
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	p.cmd = cmd
	p.done = make(chan error, 1)
	go func() { p.done <- cmd.Wait() }()
	return p.waitReady(ctx)
}

func (p *Postgres) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, p.URL("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case werr := <-p.done:
			return fmt.Errorf("postgres on port %d exited during start-up: %v (is the port free? log in %s)", p.opts.Port, werr, p.opts.Dir)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready after 60s: %w", p.opts.Port, err)
		}
	}
}

// Port is the TCP port on 127.0.0.1.
func (p *Postgres) Port() int { return p.opts.Port }

// MaxConnections is the server's max_connections.
func (p *Postgres) MaxConnections() int { return p.opts.MaxConnections }

// URL is the connection string of database db.
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", PostgresUser, p.opts.Port, db)
}

// CreateDatabase creates db (if absent) and returns its URL.
func (p *Postgres) CreateDatabase(ctx context.Context, db string) (string, error) {
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, db).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
			return "", fmt.Errorf("create database %s: %w", db, err)
		}
	}
	return p.URL(db), nil
}

// Stop shuts the server down cleanly (fast mode) and waits for it.
func (p *Postgres) Stop() error {
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
	if p.temp {
		return os.RemoveAll(p.opts.Dir)
	}
	return nil
}

// Restart stops and starts the server on the same port and data.
func (p *Postgres) Restart(ctx context.Context) error {
	if err := p.Down(); err != nil {
		return err
	}
	return p.Up(ctx)
}

// Down stops the server and keeps its data, until Up starts it again on
// the same port: an outage, for the chaos tests.
func (p *Postgres) Down() error {
	temp := p.temp
	p.temp = false // keep the data for Up
	err := p.Stop()
	p.temp = temp
	return err
}

// Up starts a server Down stopped, and waits until it accepts connections.
func (p *Postgres) Up(ctx context.Context) error {
	if p.cmd != nil {
		return fmt.Errorf("postgres on port %d is running already", p.opts.Port)
	}
	return p.start(ctx)
}

func credentialOf(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w (installing the postgresql package creates it)", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// handOver gives dir and what it holds to the user of cred, and checks
// that user can reach it: a server run as postgres by root.
func handOver(dir string, cred *syscall.Credential) error {
	if err := chownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return err
	}
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("postgres user cannot enter %s (mode %v): choose a directory elsewhere", d, fi.Mode().Perm())
		}
	}
	return nil
}

func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// RepoRoot walks up from the working directory to the directory holding
// go.mod, so tests in any package find ./bin.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/spiderpool/spiderpool\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the spiderpool repository")
		}
		dir = parent
	}
}
