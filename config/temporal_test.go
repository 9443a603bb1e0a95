package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// isolate hides the machine's temporal CLI configuration and TEMPORAL_*
// variables from a test.
func isolate(t *testing.T) {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "TEMPORAL_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
}

// parseAll is parse with its error returned, not fatal.
func parseAll(t *testing.T, args ...string) (*Config, *pflag.FlagSet, error) {
	t.Helper()
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.Flags(fs)
	c.NodeFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c, fs, c.ApplyEnv(fs)
}

func writeProfile(t *testing.T, toml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "temporal.toml")
	if err := os.WriteFile(p, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const prodProfile = `
[profile.default]
address = "default-profile:7233"

[profile.prod]
address = "prod.tmprl.cloud:7233"
namespace = "prod-ns"
api_key = "profile-key"
[profile.prod.tls]
server_ca_cert_path = "/etc/ca.pem"
client_cert_path = "/etc/client.pem"
client_key_path = "/etc/client.key"
[profile.prod.grpc_meta]
x-team = "crawl"
x-auth-token = "meta-secret"
`

// A profile gives what it has, the environment overrides it, flags
// override both, and every setting says which of them it came from.
func TestTemporalProfileThenEnvironmentThenFlags(t *testing.T) {
	isolate(t)
	file := writeProfile(t, prodProfile)
	t.Setenv(EnvTemporalConfigFile, file)
	t.Setenv(EnvTemporalProfile, "prod")
	t.Setenv(EnvNamespace, "env-ns")
	t.Setenv("TEMPORAL_TLS_SERVER_NAME", "env.example")
	c, _, err := parseAll(t, "--temporal-tls-cert-path", "/flag/client.pem", "--temporal-tls-server-name", "flag.example")
	if err != nil {
		t.Fatal(err)
	}
	tl := c.Temporal.TLS
	if c.TemporalAddress != "prod.tmprl.cloud:7233" || c.Namespace != "env-ns" || c.Temporal.APIKey != "profile-key" ||
		tl == nil || tl.ServerCACertPath != "/etc/ca.pem" || tl.ClientCertPath != "/flag/client.pem" ||
		tl.ClientKeyPath != "/etc/client.key" || tl.ServerName != "flag.example" || c.Temporal.GRPCMeta["x-team"] != "crawl" {
		t.Fatalf("resolved %+v namespace %q TLS %+v", c.Temporal, c.Namespace, tl)
	}
	inProfile := `profile "prod" of ` + file
	for key, want := range map[string]string{
		"address":                 inProfile,
		"namespace":               EnvNamespace,
		"api_key":                 inProfile,
		"tls":                     inProfile,
		"tls.server_ca_cert_path": inProfile,
		"tls.client_cert_path":    "--temporal-tls-cert-path",
		"tls.server_name":         "--temporal-tls-server-name",
		"tls.client_key_data":     "default",
		"profile":                 EnvTemporalProfile,
		"config_file":             EnvTemporalConfigFile,
	} {
		if got := c.From.Of(key); got != want {
			t.Errorf("%s from %q, want %q", key, got, want)
		}
	}
	if !c.Temporal.TLSOn() {
		t.Error("TLS off with a CA, a client certificate and an API key")
	}
}

// The settings that were there before profiles keep their precedence:
// --temporal-address over TEMPORAL_ADDRESS over the profile over the
// default.
func TestTemporalAddressPrecedence(t *testing.T) {
	isolate(t)
	t.Setenv(EnvTemporalConfigFile, writeProfile(t, prodProfile))
	c, _, err := parseAll(t)
	if err != nil || c.TemporalAddress != "default-profile:7233" || c.Namespace != "default" || c.Temporal.TLSOn() {
		t.Fatalf("default profile: address %q namespace %q TLS %v, err %v", c.TemporalAddress, c.Namespace, c.Temporal.TLSOn(), err)
	}
	t.Setenv(EnvTemporalAddress, "") // empty is unset, as it always was
	if c, _, _ = parseAll(t); c.TemporalAddress != "default-profile:7233" || !strings.HasPrefix(c.From.TemporalAddress, `profile "default"`) {
		t.Fatalf("empty TEMPORAL_ADDRESS: address %q from %q", c.TemporalAddress, c.From.TemporalAddress)
	}
	t.Setenv(EnvTemporalAddress, "env:7233")
	if c, _, _ = parseAll(t); c.TemporalAddress != "env:7233" || c.From.TemporalAddress != EnvTemporalAddress {
		t.Fatalf("env: address %q from %q", c.TemporalAddress, c.From.TemporalAddress)
	}
	if c, _, _ = parseAll(t, "--temporal-address", "flag:7233"); c.TemporalAddress != "flag:7233" || c.From.TemporalAddress != "--temporal-address" {
		t.Fatalf("flag: address %q from %q", c.TemporalAddress, c.From.TemporalAddress)
	}
	isolate(t)
	if c, _, _ = parseAll(t); c.TemporalAddress != Default().TemporalAddress || c.From.TemporalAddress != "default" || c.Temporal.TLS != nil {
		t.Fatalf("nothing set: address %q from %q, TLS %+v", c.TemporalAddress, c.From.TemporalAddress, c.Temporal.TLS)
	}
}

func TestNamedProfileMustExist(t *testing.T) {
	isolate(t)
	file := writeProfile(t, prodProfile)
	_, _, err := parseAll(t, "--temporal-config-file", file, "--temporal-profile", "staging")
	if err == nil || !strings.Contains(err.Error(), `temporal profile "staging" (from --temporal-profile) is not in `+file) ||
		!strings.Contains(err.Error(), "profiles default, prod") {
		t.Fatalf("err = %v, want it to name the profile, the file and the profiles it has", err)
	}
}

// An API key turns TLS on and travels as credentials; TEMPORAL_TLS=false
// turns TLS off even so; a missing certificate file is an error naming
// the setting's source.
func TestTemporalOptions(t *testing.T) {
	isolate(t)
	t.Setenv("TEMPORAL_API_KEY", "k")
	c, _, err := parseAll(t)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.TemporalOptions()
	if err != nil || opts.Credentials == nil || opts.ConnectionOptions.TLS == nil || opts.HostPort != Default().TemporalAddress {
		t.Fatalf("API key: credentials %v TLS %v host %q, err %v", opts.Credentials, opts.ConnectionOptions.TLS, opts.HostPort, err)
	}
	t.Setenv("TEMPORAL_TLS", "false")
	c, _, _ = parseAll(t)
	if opts, err = c.TemporalOptions(); err != nil || opts.ConnectionOptions.TLS != nil || !opts.ConnectionOptions.TLSDisabled {
		t.Fatalf("TEMPORAL_TLS=false: TLS %v disabled %v, err %v", opts.ConnectionOptions.TLS, opts.ConnectionOptions.TLSDisabled, err)
	}
	isolate(t)
	c, _, _ = parseAll(t, "--temporal-tls-cert-path", "/no/such/cert.pem", "--temporal-tls-key-path", "/no/such/key.pem")
	if err := c.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	_, err = c.TemporalOptions()
	if err == nil || !strings.Contains(err.Error(), "/no/such/cert.pem") || !strings.Contains(err.Error(), "tls.client_cert_path from --temporal-tls-cert-path") {
		t.Fatalf("err = %v, want it to name the file and the flag", err)
	}
}

func TestTemporalTLSValidation(t *testing.T) {
	isolate(t)
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", "/etc/client.pem")
	c, _, err := parseAll(t)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "got only the certificate") || !strings.Contains(err.Error(), "TEMPORAL_TLS_CLIENT_CERT_PATH") {
		t.Fatalf("err = %v, want a certificate without its key refused, naming the variable", err)
	}
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", "/etc/client.key")
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_DATA", "-----BEGIN PRIVATE KEY-----")
	c, _, _ = parseAll(t)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tls.client_key_path (from TEMPORAL_TLS_CLIENT_KEY_PATH) and tls.client_key_data") {
		t.Fatalf("err = %v, want a key path and key data refused together", err)
	}
}

// config print's rows: every secret masked, every source named.
func TestSettingsMaskSecrets(t *testing.T) {
	isolate(t)
	t.Setenv(EnvTemporalConfigFile, writeProfile(t, prodProfile))
	t.Setenv(EnvTemporalProfile, "prod")
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_DATA", "-----BEGIN PRIVATE KEY-----\nkey-secret\n-----END PRIVATE KEY-----")
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", "")
	t.Setenv(EnvDatabaseURL, "postgres://crawler:db-secret@db:5432/spiderpool?sslmode=verify-full&sslrootcert=/etc/pg-ca.pem")
	c, fs, err := parseAll(t)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Setting{}
	var all strings.Builder
	for _, s := range c.Settings(fs) {
		rows[s.Name] = s
		all.WriteString(s.Name + " " + s.Value + " " + s.From + " " + s.Env + "\n")
	}
	js, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"profile-key", "key-secret", "db-secret", "meta-secret"} {
		if strings.Contains(all.String(), secret) || strings.Contains(string(js), secret) {
			t.Errorf("secret %q shown:\n%s\n%s", secret, all.String(), js)
		}
	}
	for name, want := range map[string]Setting{
		"--database-url":               {Value: "postgres://crawler:xxxxx@db:5432/spiderpool?sslmode=verify-full&sslrootcert=/etc/pg-ca.pem", From: EnvDatabaseURL},
		"--temporal-address":           {Value: "prod.tmprl.cloud:7233", Env: EnvTemporalAddress},
		"--temporal-tls-ca-path":       {Value: "/etc/ca.pem", Env: "TEMPORAL_TLS_SERVER_CA_CERT_PATH"},
		"--temporal-profile":           {Value: "prod", From: EnvTemporalProfile},
		"temporal.api_key":             {Value: "xxxxx", Env: "TEMPORAL_API_KEY"},
		"temporal.tls.client_key_data": {Value: "xxxxx", From: "TEMPORAL_TLS_CLIENT_KEY_DATA"},
		"temporal.grpc_meta":           {Value: "x-auth-token=xxxxx,x-team=crawl"},
	} {
		got, ok := rows[name]
		if !ok {
			t.Errorf("no row %s in\n%s", name, all.String())
			continue
		}
		if got.Value != want.Value || want.From != "" && got.From != want.From || want.Env != "" && got.Env != want.Env {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	if got := rows["--temporal-address"].From; !strings.HasPrefix(got, `profile "prod" of `) {
		t.Errorf("address from %q, want the profile", got)
	}
}

func TestRedactDatabaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=verify-full&sslrootcert=/ca.pem": "postgres://u:xxxxx@h:5432/db?sslmode=verify-full&sslrootcert=/ca.pem",
		"postgresql://u@h/db?password=pw&sslmode=require":                   "postgresql://u@h/db?password=xxxxx&sslmode=require",
		"postgres://u@h/db?sslpassword=keypw":                               "postgres://u@h/db?sslpassword=xxxxx",
		"host=h user=u password=pw sslmode=verify-full":                     "host=h user=u password=xxxxx sslmode=verify-full",
		"host=h password='p w\\'x' dbname=d":                                "host=h password=xxxxx dbname=d",
		"postgres://u@h/db?sslmode=disable":                                 "postgres://u@h/db?sslmode=disable",
		"postgres://u:pw@h:notaport/db":                                     "postgres://u:xxxxx@h:notaport/db",
		"postgres://u:p w@x@h/db?sslpassword=keypw":                         "postgres://u:xxxxx@h/db?sslpassword=xxxxx",
		"postgres://u@h:notaport/db":                                        "postgres://u@h:notaport/db",
	} {
		if got := RedactDatabaseURL(in); got != want {
			t.Errorf("RedactDatabaseURL(%q) = %q, want %q", in, got, want)
		}
	}
}
