// Package config is spiderpool's one typed configuration: defaults, then
// environment variables, then flags, validated in one place.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/fetch"
)

// Config is everything a spiderpool process needs to know.
type Config struct {
	// DatabaseURL is the Postgres connection string.
	DatabaseURL string
	// TemporalAddress is the Temporal frontend host:port.
	TemporalAddress string
	// Namespace is the Temporal namespace.
	Namespace string
	// Temporal is the rest of the Temporal connection: TLS, API key.
	Temporal Temporal
	// ControlQueue is where campaign workflows and control activities run.
	ControlQueue string
	// ConnectTimeout bounds reaching Postgres and Temporal at start, so a
	// missing server fails fast with a message naming it.
	ConnectTimeout time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string

	Node Node

	// From says where DatabaseURL and the Temporal settings came from.
	From Source

	bound map[string]bool // names of the flags bound to this config
}

// Node configures a worker process.
type Node struct {
	// ID names the node in the registry and in campaigns' rings.
	ID string
	// Weight is the node's share of shard keys, relative to the others.
	Weight float64
	// FetchConcurrency caps simultaneous HTTP requests on this node.
	FetchConcurrency int
	// HeartbeatInterval is how often the node renews its registry row.
	HeartbeatInterval time.Duration
	// TTL: a node whose registry heartbeat is older is dead.
	TTL time.Duration
	// DBConns caps the node's Postgres connections (the process's, with
	// Replicas: its identities share one pool).
	DBConns int
	// Replicas runs that many node identities in one process: ID-1 to
	// ID-<Replicas>, each registered, holding its own claims and taking
	// its own batches, sharing one HTTP transport, one Postgres pool and
	// one Temporal client. 1 is a plain node. Identities of a process
	// with more than one take only pool runs' batches (they poll no task
	// queue of their own).
	Replicas int
	// AllowPrivateNetworks lets fetches reach loopback, private, link-local
	// and other non-public addresses. Off by default, so a campaign cannot
	// turn a node against its own network (the cloud metadata service at
	// 169.254.169.254, say); the dev stack and tests turn it on.
	AllowPrivateNetworks bool
	// AllowNetworks are CIDR ranges fetches may reach even so.
	AllowNetworks []string
	// MetricsAddr, when set, serves Prometheus /metrics and /healthz there
	// (host:port), and nothing else.
	MetricsAddr string
	// BodiesAddr, when set, serves the page bodies and batches processors
	// read by reference there (host:port), on a listener of its own, to
	// callers that present the node secret (Authorization: Bearer).
	BodiesAddr string
	// SecretFile names a file holding the node secret; without it the
	// secret is SPIDERPOOL_NODE_SECRET's value (see NodeSecret).
	SecretFile string
	// Secret is the node secret itself, when set in code (tests, an
	// embedding program); otherwise it is read as NodeSecret says.
	Secret string
	// PprofAddr, when set, serves Go's /debug/pprof there, on a listener
	// of its own: off by default (a profile or trace loads the CPU on
	// request), and on 127.0.0.1 when the address names no host.
	PprofAddr string
	// WARCDir, when set, is where the node writes every page it fetches as
	// WARC/1.1 records (see package archive).
	WARCDir string
	// WARCMaxSize is the size in bytes a WARC file rotates at.
	WARCMaxSize int64
	// EndedSweep is how often one node of the cluster looks for campaigns
	// whose workflow closed without finishing them in Postgres (terminated,
	// failed, timed out) and finishes them. Not a flag: tests shorten it.
	EndedSweep time.Duration
	// OTLPEndpoint, when set, is the OpenTelemetry collector (OTLP/gRPC,
	// http:// for plain text, https:// for TLS) the node sends traces to.
	OTLPEndpoint string
	// Browser, when set, makes the node a browser node: the Chromium it
	// renders pages with (spec.render), or "auto" for the one on PATH.
	// Render hosts go only to browser nodes (docs/rendering.md).
	Browser string
	// BrowserTabs caps the pages the node renders at once.
	BrowserTabs int
	// BrowserTabMemory caps, in MiB, the resident memory of one page's
	// renderer (and its JavaScript heap): a page that holds more fails.
	BrowserTabMemory int
}

// Default is the configuration with nothing set: it matches `spiderpool
// dev`, whose Postgres listens on 127.0.0.1:55432 and Temporal on 7233.
func Default() Config {
	return Config{
		DatabaseURL:     "postgres://spiderpool@127.0.0.1:55432/spiderpool?sslmode=disable",
		TemporalAddress: "127.0.0.1:7233",
		Namespace:       "default",
		ControlQueue:    campaign.DefaultControlQueue,
		ConnectTimeout:  5 * time.Second,
		LogLevel:        "info",
		LogFormat:       "text",
		Node: Node{
			Weight:            1,
			FetchConcurrency:  128,
			HeartbeatInterval: 3 * time.Second,
			TTL:               15 * time.Second,
			DBConns:           16,
			Replicas:          1,
			WARCMaxSize:       1 << 30,
			BrowserTabs:       2,
			BrowserTabMemory:  1024,
			EndedSweep:        time.Minute,
		},
	}
}

// Source says where a setting came from ("default", "--flag" or the
// environment variable), for messages like "cannot reach Postgres at ...
// (from DATABASE_URL)".
type Source struct {
	DatabaseURL     string
	TemporalAddress string
	// Temporal maps each Temporal connection setting, by its key in a TOML
	// profile (address, api_key, tls.server_ca_cert_path), to where it came
	// from: a flag, an environment variable, a profile or "default".
	Temporal map[string]string
}

// Of says where the Temporal setting key came from; empty when the
// configuration was built in code, not read by ApplyEnv.
func (s Source) Of(key string) string {
	if key == "address" && s.TemporalAddress != "" {
		return s.TemporalAddress
	}
	return s.Temporal[key]
}

// Env names. DATABASE_URL and TEMPORAL_ADDRESS are the names other tools
// use; the rest are prefixed.
const (
	EnvDatabaseURL     = "DATABASE_URL"
	EnvTemporalAddress = "TEMPORAL_ADDRESS"
	EnvNamespace       = "TEMPORAL_NAMESPACE"
	EnvControlQueue    = "SPIDERPOOL_CONTROL_QUEUE"
	EnvLogLevel        = "SPIDERPOOL_LOG_LEVEL"
	EnvLogFormat       = "SPIDERPOOL_LOG_FORMAT"
	EnvNodeID          = "SPIDERPOOL_NODE_ID"
	EnvNodeWeight      = "SPIDERPOOL_NODE_WEIGHT"
	EnvAllowPrivate    = "SPIDERPOOL_ALLOW_PRIVATE_NETWORKS"
)

// Flags binds the shared settings to fs. After parsing, ApplyEnv fills in
// what the command line left out: a flag given wins over its environment
// variable, which wins over the default.
func (c *Config) Flags(fs *pflag.FlagSet) {
	defer c.bind(fs)
	src := &c.From
	*src = Source{DatabaseURL: "default", TemporalAddress: "default"}
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "Postgres URL (env "+EnvDatabaseURL+")")
	fs.StringVar(&c.TemporalAddress, "temporal-address", c.TemporalAddress, "Temporal frontend host:port (env "+EnvTemporalAddress+")")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "Temporal namespace (env "+EnvNamespace+")")
	fs.StringVar(&c.ControlQueue, "control-queue", c.ControlQueue, "task queue of campaign workflows (env "+EnvControlQueue+")")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", c.ConnectTimeout, "how long to try reaching Postgres and Temporal")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (env "+EnvLogLevel+")")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json (env "+EnvLogFormat+")")
	c.temporalFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "database-url" {
			f.Value = &sourced{Value: f.Value, src: &src.DatabaseURL}
		}
	})
}

// NodeFlags binds the worker settings.
func (c *Config) NodeFlags(fs *pflag.FlagSet) {
	defer c.bind(fs)
	n := &c.Node
	fs.StringVar(&n.ID, "node", n.ID, "node ID, unique in the pool (env "+EnvNodeID+")")
	fs.Float64Var(&n.Weight, "weight", n.Weight, "share of hosts relative to other nodes; 0 takes none (env "+EnvNodeWeight+")")
	fs.IntVar(&n.FetchConcurrency, "fetch-concurrency", n.FetchConcurrency, "simultaneous HTTP requests on this node")
	// Kept so a node started with it still starts, and says what to do.
	fs.Int("max-batches", 32, "ignored")
	_ = fs.MarkDeprecated("max-batches", "it does nothing since nodes take their batches from Postgres (v0.11.0); remove it")
	fs.DurationVar(&n.HeartbeatInterval, "heartbeat-interval", n.HeartbeatInterval, "how often the node renews its registry row")
	fs.DurationVar(&n.TTL, "ttl", n.TTL, "registry heartbeat age past which campaigns treat this node as dead")
	fs.IntVar(&n.DBConns, "db-conns", n.DBConns, "Postgres connections of this node")
	fs.IntVar(&n.Replicas, "replicas", n.Replicas, "node identities in this process (ID-1 to ID-N), sharing its HTTP transport and Postgres pool")
	fs.BoolVar(&n.AllowPrivateNetworks, "allow-private-networks", n.AllowPrivateNetworks,
		"let fetches reach loopback, private and link-local addresses (env "+EnvAllowPrivate+"; off: refused at dial time)")
	fs.StringArrayVar(&n.AllowNetworks, "allow-network", n.AllowNetworks, "CIDR range fetches may reach even if private (repeatable)")
	fs.StringVar(&n.MetricsAddr, "metrics-addr", n.MetricsAddr, "serve Prometheus /metrics and /healthz on this host:port")
	fs.StringVar(&n.BodiesAddr, "bodies-addr", n.BodiesAddr,
		"serve page bodies and batches to processors on this host:port, to callers with the node secret ("+EnvNodeSecret+" or --node-secret-file)")
	fs.StringVar(&n.SecretFile, "node-secret-file", n.SecretFile, "file holding the secret processors present to --bodies-addr (instead of "+EnvNodeSecret+")")
	fs.StringVar(&n.PprofAddr, "pprof", n.PprofAddr, "serve Go's /debug/pprof on this host:port (a bare :port is 127.0.0.1:port); off when empty")
	fs.StringVar(&n.WARCDir, "warc-dir", n.WARCDir, "write every fetched page as WARC/1.1 records into this directory")
	fs.Int64Var(&n.WARCMaxSize, "warc-max-size", n.WARCMaxSize, "bytes at which a WARC file is closed and the next begun")
	fs.StringVar(&n.Browser, "browser", n.Browser, "render the pages campaigns ask a browser for (spec.render) with this Chromium; \"auto\": the one on PATH")
	fs.IntVar(&n.BrowserTabs, "browser-tabs", n.BrowserTabs, "pages this node renders at once (with --browser)")
	fs.IntVar(&n.BrowserTabMemory, "browser-tab-memory", n.BrowserTabMemory, "MiB of memory a page being rendered may hold; more fails the page (with --browser)")
	fs.StringVar(&n.OTLPEndpoint, "otlp-endpoint", n.OTLPEndpoint, "send OpenTelemetry traces of workflows and activities to this OTLP/gRPC collector (http://host:4317)")
}

// envNames are the environment variables of flags whose names other tools
// share; every other flag NAME reads SPIDERPOOL_NAME (dashes as
// underscores), so a container can be configured by environment alone.
var envNames = map[string]string{
	"database-url":           EnvDatabaseURL,
	"temporal-address":       EnvTemporalAddress,
	"namespace":              EnvNamespace,
	"temporal-config-file":   EnvTemporalConfigFile,
	"temporal-profile":       EnvTemporalProfile,
	"control-queue":          EnvControlQueue,
	"log-level":              EnvLogLevel,
	"log-format":             EnvLogFormat,
	"node":                   EnvNodeID,
	"weight":                 EnvNodeWeight,
	"allow-private-networks": EnvAllowPrivate,
}

// EnvName is the environment variable that sets flag name.
func EnvName(flag string) string {
	if e, ok := envNames[flag]; ok {
		return e
	}
	for _, s := range temporalSettings {
		if s.flag == flag {
			return s.env
		}
	}
	return "SPIDERPOOL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func (c *Config) bind(fs *pflag.FlagSet) {
	if c.bound == nil {
		c.bound = map[string]bool{}
	}
	fs.VisitAll(func(f *pflag.Flag) { c.bound[f.Name] = true })
}

// ApplyEnv sets each configuration flag in fs that the command line left
// out from its environment variable, if set (see EnvName); a value that
// does not parse is an error naming the variable. Flags of a command's own
// (--json, --spec) are not configuration and read no environment. The
// Temporal connection is read as the temporal CLI reads it: a TOML
// profile, then TEMPORAL_* variables, then the flags (see Temporal).
func (c *Config) ApplyEnv(fs *pflag.FlagSet) error {
	var errs []error
	if c.bound["temporal-address"] {
		errs = append(errs, c.applyTemporal(fs))
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || !c.bound[f.Name] || isTemporalFlag(f.Name) {
			return
		}
		env := EnvName(f.Name)
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (for --%s): %w", env, v, f.Name, err))
			return
		}
		f.Changed = false // still not from the command line
		if f.Name == "database-url" {
			c.From.DatabaseURL = env
		}
	})
	return errors.Join(errs...)
}

// FromEnv is the configuration of a process with no command line of its
// own (a processor's Run): defaults, then the environment as ApplyEnv
// reads it, validated.
func FromEnv() (Config, error) { return fromEnv(false) }

// NodeFromEnv is FromEnv with the worker settings too, read from the
// environment as `spiderpool worker` reads them: for a node in a user's
// binary (see package colocate). The caller sets the node's ID and weight,
// then calls ValidateNode.
func NodeFromEnv() (Config, error) { return fromEnv(true) }

func fromEnv(node bool) (Config, error) {
	cfg := Default()
	fs := pflag.NewFlagSet("environment", pflag.ContinueOnError)
	cfg.Flags(fs)
	if node {
		cfg.NodeFlags(fs)
	}
	if err := fs.Parse(nil); err != nil {
		return cfg, err
	}
	if err := cfg.ApplyEnv(fs); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// SourceOf says where flag f's value came from: "--name", the environment
// variable, or "default".
func SourceOf(f *pflag.Flag) string {
	if f.Changed {
		return "--" + f.Name
	}
	if v, ok := os.LookupEnv(EnvName(f.Name)); ok && v != "" {
		return EnvName(f.Name)
	}
	return "default"
}

// IDs are the node identities of the process: ID itself, or ID-1 to
// ID-<Replicas>, numbered to the same width so they sort in order.
func (n Node) IDs() []string {
	if n.Replicas <= 1 {
		return []string{n.ID}
	}
	width := len(fmt.Sprint(n.Replicas))
	ids := make([]string, n.Replicas)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%0*d", n.ID, width, i+1)
	}
	return ids
}

// Guard is the fetch address policy of the node settings.
func (n Node) Guard() (fetch.Guard, error) {
	g := fetch.Guard{AllowPrivate: n.AllowPrivateNetworks}
	for _, c := range n.AllowNetworks {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return g, fmt.Errorf("--allow-network %q: want a CIDR range like 10.1.0.0/16", c)
		}
		g.Allow = append(g.Allow, p.Masked())
	}
	return g, nil
}

// sourced records that a flag was set on the command line.
type sourced struct {
	pflag.Value
	src *string
}

func (s *sourced) Set(v string) error {
	*s.src = "--flag"
	return s.Value.Set(v)
}

// Validate checks the shared settings.
func (c *Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("database URL is empty (set --database-url or "+EnvDatabaseURL+")"))
	}
	if c.TemporalAddress == "" {
		errs = append(errs, errors.New("temporal address is empty (set --temporal-address or "+EnvTemporalAddress+")"))
	}
	if c.ControlQueue == "" {
		errs = append(errs, errors.New("control queue is empty"))
	}
	if c.ConnectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("connect timeout must be > 0, got %v", c.ConnectTimeout))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log level must be debug, info, warn or error, got %q", c.LogLevel))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log format must be text or json, got %q", c.LogFormat))
	}
	errs = append(errs, c.validateTemporal())
	return errors.Join(errs...)
}

// ValidateNode checks the worker settings.
func (c *Config) ValidateNode() error {
	n := c.Node
	var errs []error
	if err := campaign.ValidNodeID(n.ID); err != nil {
		errs = append(errs, fmt.Errorf("--node: %w", err))
	}
	if err := campaign.ValidWeight("--weight", n.Weight); err != nil {
		errs = append(errs, err)
	}
	if n.FetchConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--fetch-concurrency must be >= 1, got %d", n.FetchConcurrency))
	}
	if n.TTL < 2*n.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("--ttl must be at least twice the heartbeat interval %v, got %v", n.HeartbeatInterval, n.TTL))
	}
	if n.Replicas < 1 || n.Replicas > 100_000 {
		errs = append(errs, fmt.Errorf("--replicas must be 1..100000, got %d", n.Replicas))
	}
	if n.DBConns < 2 {
		errs = append(errs, fmt.Errorf("--db-conns must be >= 2, got %d", n.DBConns))
	}
	if _, err := n.Guard(); err != nil {
		errs = append(errs, err)
	}
	if n.BodiesAddr != "" {
		if _, err := n.BodiesSecret(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.BrowserTabs < 1 || n.BrowserTabs > 64 {
		errs = append(errs, fmt.Errorf("--browser-tabs must be 1..64, got %d", n.BrowserTabs))
	}
	if n.BrowserTabMemory < 128 || n.BrowserTabMemory > 65536 {
		errs = append(errs, fmt.Errorf("--browser-tab-memory must be 128..65536 (MiB), got %d", n.BrowserTabMemory))
	}
	if n.Browser != "" && n.Browser != "auto" {
		if _, err := exec.LookPath(n.Browser); err != nil {
			errs = append(errs, fmt.Errorf("--browser %q: not an executable (%v); give Chromium's path, or \"auto\" for the one on PATH", n.Browser, err))
		}
	}
	if n.WARCMaxSize < 1<<20 {
		errs = append(errs, fmt.Errorf("--warc-max-size must be at least 1 MiB (1048576), got %d", n.WARCMaxSize))
	}
	return errors.Join(errs...)
}
