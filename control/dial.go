// Package control is the operator's side of spiderpool: it connects to
// Temporal and starts, inspects and steers campaigns. The CLI is a thin
// shell over it, and the tests and the demo drive campaigns through it.
package control

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc/codes"

	"github.com/spiderpool/spiderpool/config"
)

// Dial connects to Temporal and checks the namespace answers within
// cfg.ConnectTimeout. The connection is cfg's: address, namespace, TLS and
// API key (see config.Temporal). The error names the address and where it
// came from; a failed TLS handshake is a *TLSError saying what to change.
// Each of with may adjust the client options (a node adds its metrics).
func Dial(ctx context.Context, cfg config.Config, logger *slog.Logger, with ...func(*client.Options)) (client.Client, error) {
	where := describe(cfg)
	opts, err := cfg.TemporalOptions()
	if err != nil {
		return nil, fmt.Errorf("cannot connect to Temporal at %s: %w", where, err)
	}
	opts.Logger = tlog.NewStructuredLogger(logger)
	opts.ConnectionOptions.GetSystemInfoTimeout = cfg.ConnectTimeout
	for _, w := range with {
		w(&opts)
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		if tlsErr := probeTLS(ctx, cfg, opts.ConnectionOptions.TLS, err); tlsErr != nil {
			err = tlsErr
		}
		return nil, fmt.Errorf("cannot reach Temporal at %s: %w%s", where, silence(ctx, dctx, cfg, err), credentialHint(cfg, err))
	}
	if _, err := c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Namespace}); err != nil {
		c.Close()
		return nil, fmt.Errorf("cannot use Temporal namespace at %s: %w%s", where, silence(ctx, dctx, cfg, err), credentialHint(cfg, err))
	}
	return c, nil
}

// describe names the server for errors: address, namespace, where the
// address came from and how the connection is secured.
func describe(cfg config.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (namespace %s, address from %s", cfg.TemporalAddress, cfg.Namespace, from(cfg.From.Of("address")))
	if cfg.Temporal.TLSOn() {
		b.WriteString(", TLS")
	}
	if cfg.Temporal.APIKey != "" {
		b.WriteString(", API key")
		if src := cfg.From.Of("api_key"); src != "" {
			b.WriteString(" from " + src)
		}
	}
	b.WriteString(")")
	return b.String()
}

// credentialHint says which credentials a server refused.
func credentialHint(cfg config.Config, err error) string {
	switch code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
	default:
		return ""
	}
	if cfg.Temporal.APIKey == "" {
		return " (no API key given: set TEMPORAL_API_KEY or api_key in the temporal CLI profile)"
	}
	if src := cfg.From.Of("api_key"); src != "" {
		return " (the server refused the API key from " + src + ")"
	}
	return " (the server refused the API key)"
}

// silence says so when the server never answered: a blackholed address or
// a listener that accepts and stays mute ends in the SDK's "context
// deadline exceeded", which does not tell a person what to change.
func silence(ctx, dctx context.Context, cfg config.Config, err error) error {
	var tlsErr *TLSError
	if errors.As(err, &tlsErr) {
		return err
	}
	timedOut := errors.Is(dctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		code(err) == codes.DeadlineExceeded // the SDK's own timer may fire a moment before dctx's
	if ctx.Err() == nil && timedOut {
		return fmt.Errorf("no answer within %v (--connect-timeout): %w", cfg.ConnectTimeout, err)
	}
	return err
}

// code is the gRPC code of an SDK error, which wraps Temporal's service
// errors (these carry a status, not a gRPC one).
func code(err error) codes.Code { return serviceerror.ToStatus(err).Code() }

func from(src string) string {
	if src == "" {
		return "default"
	}
	return src
}

// TLSError is a TLS handshake with Temporal that failed: the server's
// certificate is not signed by a trusted CA or names another host, the
// server wants a client certificate or refused ours, or one side speaks
// TLS and the other does not. Err is the handshake's error (an
// x509.UnknownAuthorityError, say); Hint says what to change.
type TLSError struct {
	Address string
	Err     error
	Hint    string
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("TLS handshake with %s failed: %v: %s", e.Address, e.Err, e.Hint)
}

func (e *TLSError) Unwrap() error { return e.Err }

// probeBudget bounds the handshake probeTLS makes after a failed dial.
const probeBudget = 2 * time.Second

// probeTLS finds out whether a dial failed in its TLS handshake. The SDK
// reports that as a gRPC Unavailable whose text is all that is left of
// the cause, so after such a failure one handshake of our own, with the
// same TLS settings, recovers the typed error and says which setting to
// change. Nil when the handshake is not the cause.
func probeTLS(ctx context.Context, cfg config.Config, conf *tls.Config, dialErr error) error {
	if code(dialErr) != codes.Unavailable {
		return nil // a mute server, a refused namespace: not a handshake
	}
	budget := min(probeBudget, cfg.ConnectTimeout)
	pctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	addr := cfg.TemporalAddress
	if conf == nil {
		// TLS is off. A server that completes a handshake wants TLS.
		conn, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}}).DialContext(pctx, "tcp", addr) //nolint:gosec // only asks whether the server speaks TLS
		if err != nil {
			return nil
		}
		conn.Close()
		return &TLSError{Address: addr, Err: errors.New("the server speaks TLS and TLS is off"),
			Hint: "set TEMPORAL_TLS=true or --temporal-tls, with TEMPORAL_TLS_SERVER_CA_CERT_PATH if its CA is private"}
	}
	conf = conf.Clone()
	conf.NextProtos = []string{"h2"}
	if conf.ServerName == "" {
		conf.ServerName, _, _ = net.SplitHostPort(addr)
	}
	conn, err := (&tls.Dialer{Config: conf}).DialContext(pctx, "tcp", addr)
	if err == nil {
		// Under TLS 1.3 the server judges our certificate after our side
		// of the handshake is done: its verdict is the first thing read.
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(budget))
		_, err = conn.Read(make([]byte, 1))
		var opErr *net.OpError
		if err == nil || !errors.As(err, &opErr) || opErr.Op != "remote error" {
			return nil // the server spoke HTTP/2, or hung up without a TLS word
		}
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return &TLSError{Address: addr, Err: err, Hint: tlsHint(cfg, conf, err)}
}

// tlsHint says which setting a handshake error asks to change.
func tlsHint(cfg config.Config, conf *tls.Config, err error) string {
	// src is " (what from where)", or nothing for a configuration built in
	// code, which has no sources.
	src := func(what, key string) string {
		if f := cfg.From.Of(key); f != "" {
			return " (" + what + " from " + f + ")"
		}
		return ""
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
		opErr     *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA):
		if t := cfg.Temporal.TLS; t != nil && (t.ServerCACertPath != "" || len(t.ServerCACertData) > 0) {
			ca, key := t.ServerCACertPath, "tls.server_ca_cert_path"
			if ca == "" {
				ca, key = "the PEM data", "tls.server_ca_cert_data"
			}
			return fmt.Sprintf("the server's certificate is not signed by the CA in %s%s", ca, src("server CA", key))
		}
		return "the server's certificate is not signed by a CA this system trusts: " +
			"give its CA with TEMPORAL_TLS_SERVER_CA_CERT_PATH or --temporal-tls-ca-path"
	case errors.As(err, &hostname):
		return fmt.Sprintf("the server's certificate is not for %q: set TEMPORAL_TLS_SERVER_NAME or "+
			"--temporal-tls-server-name to a name it carries%s", conf.ServerName, src("server name", "tls.server_name"))
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired, or not for a server)"
	case errors.As(err, &header) && cfg.Temporal.APIKey != "":
		// Never advise turning TLS off here: the key would go in clear.
		return "the server does not speak TLS, and an API key is only ever sent over TLS: " +
			"check the address (TEMPORAL_ADDRESS or --temporal-address) is the server's TLS endpoint, " +
			"or drop the API key for a server without TLS"
	case errors.As(err, &header):
		return fmt.Sprintf("the server does not speak TLS: TLS is on%s; "+
			"set TEMPORAL_TLS=false or --temporal-tls=false if it should be off", src("TLS", "tls"))
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		if len(conf.Certificates) == 0 {
			return "the server refused the connection, and we sent no client certificate: " +
				"set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH (or --temporal-tls-cert-path and --temporal-tls-key-path)"
		}
		key := "tls.client_cert_path"
		if t := cfg.Temporal.TLS; t != nil && t.ClientCertPath == "" {
			key = "tls.client_cert_data"
		}
		return fmt.Sprintf("the server refused our client certificate%s: it is not signed by a CA the server trusts, or has expired", src("certificate", key))
	}
	return "check the TLS settings"
}
