// Package tlstest runs spiderpool the way it meets Temporal Cloud or a TLS
// cluster and a managed Postgres: through TLS with a client certificate
// and an API key, against a local gateway in front of the dev server, and
// against a throwaway Postgres with ssl=on. Nothing here is a mock: the
// gateway forwards every call to the real dev server.
package tlstest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/contrib/envconfig"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

var bg = context.Background()

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// tlsWorld is one test's PKI and gateway: the server's CA, a client
// certificate the gateway accepts, and the gateway on the dev server.
type tlsWorld struct {
	ca      *authority
	client  issued
	gateway *gateway
}

const (
	clientKey  = "key-of-the-client-and-node-a"
	profileKey = "key-of-node-b-from-its-profile"
)

func newTLSWorld(t *testing.T) tlsWorld {
	t.Helper()
	ca := newAuthority(t, "temporal-test")
	w := tlsWorld{ca: ca, client: ca.client("spiderpool-node")}
	w.gateway = startGateway(t, harness.Temporal(t).Address(), ca.server("temporal-gateway").TLS, ca, clientKey, profileKey)
	return w
}

// secured is cfg pointed at the gateway with the world's CA, client
// certificate and the API key given.
func (w tlsWorld) secured(cfg config.Config, apiKey string) config.Config {
	cfg.TemporalAddress = w.gateway.Addr
	cfg.From.TemporalAddress = "test"
	cfg.Temporal = config.Temporal{
		APIKey: apiKey,
		TLS: &envconfig.ClientConfigTLS{
			ServerCACertPath: w.ca.CAFile,
			ClientCertPath:   w.client.CertFile,
			ClientKeyPath:    w.client.KeyFile,
		},
	}
	cfg.ConnectTimeout = 10 * time.Second
	return cfg
}

// A campaign runs through a TLS endpoint that demands a client certificate
// and an API key. The client that starts it and both nodes reach Temporal
// only through the gateway: node a in process, configured in code; node b
// as `spiderpool worker`, its CA from TEMPORAL_TLS_SERVER_CA_CERT_PATH, its
// certificate, key and API key from a temporal CLI profile, its address
// from --temporal-address. The gateway's record shows each API key as the
// SDK sent it.
func TestCampaignThroughMutualTLSWithAPIKeys(t *testing.T) {
	w := newTLSWorld(t)
	web := harness.StartWeb(t, synthweb.Config{Hosts: 8, Pages: 240, LinksPerPage: 4, CrossHostFraction: 0.3, Seed: 16})
	s := harness.NewStack(t)
	cfg := w.secured(s.Config, clientKey)
	c, err := control.Dial(bg, cfg, s.Log)
	if err != nil {
		t.Fatalf("dial through the gateway: %v", err)
	}
	t.Cleanup(c.Close)
	campaigns := &control.Campaigns{Client: c, Queue: cfg.ControlQueue}

	a := s.StartNodeWith("a", 1, func(n *config.Config) { n.TemporalAddress, n.Temporal = cfg.TemporalAddress, cfg.Temporal })

	profile := filepath.Join(t.TempDir(), "temporal.toml")
	toml := fmt.Sprintf("[profile.gateway]\napi_key = %q\n[profile.gateway.tls]\nclient_cert_path = %q\nclient_key_path = %q\n",
		profileKey, w.client.CertFile, w.client.KeyFile)
	if err := os.WriteFile(profile, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", w.ca.CAFile) // inherited by node b's process
	b := s.StartNodeProcess("b", 1, "--temporal-address", w.gateway.Addr,
		"--temporal-config-file", profile, "--temporal-profile", "gateway")

	spec := campaign.Spec{
		Seeds:      []string{web.Seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 4},
	}
	id := "tls-" + s.Name
	run, err := campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatalf("start through the gateway: %v", err)
	}
	ctx, cancel := context.WithTimeout(bg, 3*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		t.Fatalf("campaign %s: %v\nnode b's log:\n%s", id, err, b.Log())
	}
	if missing, dup := web.Tally(); sum.Fetched != int64(len(web.Pages())) || missing != 0 || dup != 0 || sum.Outcome != campaign.OutcomeCompleted {
		t.Errorf("outcome %s, fetched %d of %d pages, %d missing, %d twice", sum.Outcome, sum.Fetched, len(web.Pages()), missing, dup)
	}

	for _, want := range []struct{ method, key, who string }{
		{"StartWorkflowExecution", clientKey, "the client"},
		{"PollActivityTaskQueue", clientKey, "node " + a},
		{"PollActivityTaskQueue", profileKey, "node " + b.ID},
		{"PollWorkflowTaskQueue", profileKey, "node " + b.ID},
	} {
		if !w.gateway.Saw(want.method, "Bearer "+want.key, "spiderpool-node") {
			t.Errorf("the gateway saw no %s from %s with authorization \"Bearer %s\" and the client certificate", want.method, want.who, want.key)
		}
	}
	for _, c := range w.gateway.Calls() {
		if c.Authorization != "Bearer "+clientKey && c.Authorization != "Bearer "+profileKey {
			t.Errorf("%s reached the gateway with authorization %q", c.Method, c.Authorization)
			break
		}
	}
	t.Logf("%d pages, per node %v; the gateway forwarded %d calls", sum.Fetched, sum.PerNode, len(w.gateway.Calls()))
}

// A client that does not trust the server's CA fails at once, with an
// error that says TLS, names the address and the CA file, and wraps the
// x509 error.
func TestWrongCAFailsFast(t *testing.T) {
	w := newTLSWorld(t)
	other := newAuthority(t, "some-other-ca")
	cfg := w.secured(config.Default(), clientKey)
	cfg.Temporal.TLS.ServerCACertPath = other.CAFile
	start := time.Now()
	c, err := control.Dial(bg, cfg, slogDiscard())
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("dial with the wrong CA succeeded")
	}
	var tlsErr *control.TLSError
	var unknownCA x509.UnknownAuthorityError
	if !errors.As(err, &tlsErr) || tlsErr.Address != w.gateway.Addr || !errors.As(err, &unknownCA) {
		t.Fatalf("err = %v (%T), want a *control.TLSError for %s wrapping x509.UnknownAuthorityError", err, err, w.gateway.Addr)
	}
	for _, want := range []string{"TLS handshake with " + w.gateway.Addr, "not signed by the CA in " + other.CAFile} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q lacks %q", err, want)
		}
	}
	// Fast: well before the connect timeout, which a retry loop would wait out.
	if took >= cfg.ConnectTimeout/2 {
		t.Errorf("took %v to fail, connect timeout %v", took, cfg.ConnectTimeout)
	}
	if len(w.gateway.Calls()) != 0 {
		t.Errorf("calls reached the gateway: %v", w.gateway.Calls())
	}
	t.Logf("failed in %v: %v", took.Round(time.Millisecond), err)
}

// Without a client certificate the gateway refuses the handshake, and the
// error says a certificate is wanted; without an API key the TLS holds but
// the call is refused, and the error says no key was given.
func TestMissingClientCertificateOrAPIKeyIsNamed(t *testing.T) {
	w := newTLSWorld(t)
	cfg := w.secured(config.Default(), clientKey)
	cfg.Temporal.TLS.ClientCertPath, cfg.Temporal.TLS.ClientKeyPath = "", ""
	_, err := control.Dial(bg, cfg, slogDiscard())
	var tlsErr *control.TLSError
	if !errors.As(err, &tlsErr) || !strings.Contains(err.Error(), "we sent no client certificate") {
		t.Errorf("without a client certificate: err = %v, want a *control.TLSError saying none was sent", err)
	}
	t.Logf("without a client certificate: %v", err)

	cfg = w.secured(config.Default(), "")
	_, err = control.Dial(bg, cfg, slogDiscard())
	if status.Code(errors.Unwrap(err)) != codes.Unauthenticated && !strings.Contains(err.Error(), "Unauthenticated") ||
		!strings.Contains(err.Error(), "no API key given") || errors.As(err, &tlsErr) {
		t.Errorf("without an API key: err = %v, want the server's refusal and a hint to set one", err)
	}
	t.Logf("without an API key: %v", err)
	if !w.gateway.Saw("GetSystemInfo", "", "spiderpool-node") && !w.gateway.Saw("DescribeNamespace", "", "spiderpool-node") {
		t.Errorf("the keyless call never reached the gateway over TLS: %v", w.gateway.Calls())
	}
}

// The CLI takes the same settings from flags and says the same thing: a
// wrong CA given as --temporal-tls-ca-path is refused, naming TLS, the
// address and the flag.
func TestCLIRefusesAWrongCANamingTheFlag(t *testing.T) {
	w := newTLSWorld(t)
	other := newAuthority(t, "some-other-ca")
	cmd := exec.Command(harness.Binary(t), "campaign", "status", "any",
		"--temporal-address", w.gateway.Addr, "--temporal-tls-ca-path", other.CAFile,
		"--temporal-tls-cert-path", w.client.CertFile, "--temporal-tls-key-path", w.client.KeyFile)
	cmd.Env = append(os.Environ(), "TEMPORAL_API_KEY="+clientKey, "TEMPORAL_CONFIG_FILE="+filepath.Join(t.TempDir(), "none.toml"))
	r := harness.RunCommand(t, time.Minute, cmd)
	if r.Code == 0 {
		t.Fatalf("campaign status with a wrong CA: exit 0; stderr %q", r.Stderr)
	}
	for _, want := range []string{"TLS handshake with " + w.gateway.Addr, "not signed by the CA in " + other.CAFile,
		"server CA from --temporal-tls-ca-path", "API key from TEMPORAL_API_KEY"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr %q lacks %q", r.Stderr, want)
		}
	}
}
