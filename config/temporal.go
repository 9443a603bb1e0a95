package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
)

// Temporal is the Temporal connection beyond its address and namespace:
// TLS, an API key, gRPC metadata. ApplyEnv reads it the way the temporal
// CLI and the SDKs do, through the SDK's envconfig: a profile of a TOML
// file (~/.config/temporalio/temporal.toml unless TEMPORAL_CONFIG_FILE
// says otherwise), then the TEMPORAL_* environment variables, then
// spiderpool's --temporal-* flags. One profile serves `temporal` and
// spiderpool alike.
type Temporal struct {
	// Profile names the TOML profile; empty is "default", which may be
	// absent (a named one must exist).
	Profile string
	// ConfigFile is the TOML file; empty is the temporal CLI's default.
	ConfigFile string
	// APIKey, when set, goes with every call as "authorization: Bearer
	// <key>" and turns TLS on unless TLS is disabled explicitly.
	APIKey string
	// TLS, when non-nil and not Disabled, turns TLS on: server CA, client
	// certificate and key (mTLS), server name. Paths or PEM data.
	TLS *envconfig.ClientConfigTLS
	// GRPCMeta are more headers sent with every call.
	GRPCMeta map[string]string
	// Authority overrides the :authority pseudo-header.
	Authority string
}

// TLSOn says whether the connection uses TLS: the SDK's rule, also the
// temporal CLI's.
func (t Temporal) TLSOn() bool {
	if t.TLS != nil {
		return !t.TLS.Disabled
	}
	return t.APIKey != ""
}

// TemporalOptions are the SDK client options for cfg's Temporal
// connection, converted by envconfig exactly as the temporal CLI converts
// a profile: a bad certificate or key is an error naming where its setting
// came from.
func (c Config) TemporalOptions() (client.Options, error) {
	p := envconfig.ClientConfigProfile{
		Address:   c.TemporalAddress,
		Namespace: c.Namespace,
		APIKey:    c.Temporal.APIKey,
		TLS:       c.Temporal.TLS,
		GRPCMeta:  c.Temporal.GRPCMeta,
		Authority: c.Temporal.Authority,
	}
	opts, err := p.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return opts, fmt.Errorf("temporal %w (TLS settings: %s)", err, c.tlsSources())
	}
	return opts, nil
}

// tlsSources lists the TLS settings given and where each came from.
func (c Config) tlsSources() string {
	var given []string
	for _, s := range temporalSettings {
		if strings.HasPrefix(s.key, "tls.") && s.get(c) != "" {
			given = append(given, s.key+" from "+c.From.Of(s.key))
		}
	}
	if len(given) == 0 {
		return "none"
	}
	return strings.Join(given, ", ")
}

// temporalSetting is one setting of the Temporal connection under its
// three names: its key in a TOML profile, its environment variable (both
// envconfig's) and spiderpool's flag, if it has one. Secrets and PEM data
// have no flag: a command line is readable by every user of the machine.
type temporalSetting struct {
	key    string // in a TOML profile: address, tls.server_ca_cert_path
	env    string
	flag   string
	secret bool
	get    func(Config) string
	set    func(*envconfig.ClientConfigProfile, string) // from the flag's value
}

func tlsOf(p *envconfig.ClientConfigProfile) *envconfig.ClientConfigTLS {
	if p.TLS == nil {
		p.TLS = &envconfig.ClientConfigTLS{}
	}
	return p.TLS
}

func tlsField(c Config, f func(*envconfig.ClientConfigTLS) string) string {
	if c.Temporal.TLS == nil {
		return ""
	}
	return f(c.Temporal.TLS)
}

func onOff(b bool) string {
	if b {
		return "true"
	}
	return ""
}

var temporalSettings = []temporalSetting{
	{key: "address", env: EnvTemporalAddress, flag: "temporal-address",
		get: func(c Config) string { return c.TemporalAddress },
		set: func(p *envconfig.ClientConfigProfile, v string) { p.Address = v }},
	{key: "namespace", env: EnvNamespace, flag: "namespace",
		get: func(c Config) string { return c.Namespace },
		set: func(p *envconfig.ClientConfigProfile, v string) { p.Namespace = v }},
	{key: "api_key", env: "TEMPORAL_API_KEY", secret: true,
		get: func(c Config) string { return c.Temporal.APIKey }},
	{key: "tls", env: "TEMPORAL_TLS", flag: "temporal-tls",
		get: func(c Config) string {
			if c.Temporal.TLSOn() {
				return "true"
			}
			return "false"
		},
		set: func(p *envconfig.ClientConfigProfile, v string) { tlsOf(p).Disabled = v != "true" }},
	{key: "tls.server_ca_cert_path", env: "TEMPORAL_TLS_SERVER_CA_CERT_PATH", flag: "temporal-tls-ca-path",
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return t.ServerCACertPath })
		},
		set: func(p *envconfig.ClientConfigProfile, v string) { tlsOf(p).ServerCACertPath = v }},
	{key: "tls.server_ca_cert_data", env: "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return string(t.ServerCACertData) })
		}},
	{key: "tls.client_cert_path", env: "TEMPORAL_TLS_CLIENT_CERT_PATH", flag: "temporal-tls-cert-path",
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return t.ClientCertPath })
		},
		set: func(p *envconfig.ClientConfigProfile, v string) { tlsOf(p).ClientCertPath = v }},
	{key: "tls.client_cert_data", env: "TEMPORAL_TLS_CLIENT_CERT_DATA",
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return string(t.ClientCertData) })
		}},
	{key: "tls.client_key_path", env: "TEMPORAL_TLS_CLIENT_KEY_PATH", flag: "temporal-tls-key-path",
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return t.ClientKeyPath })
		},
		set: func(p *envconfig.ClientConfigProfile, v string) { tlsOf(p).ClientKeyPath = v }},
	{key: "tls.client_key_data", env: "TEMPORAL_TLS_CLIENT_KEY_DATA", secret: true,
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return string(t.ClientKeyData) })
		}},
	{key: "tls.server_name", env: "TEMPORAL_TLS_SERVER_NAME", flag: "temporal-tls-server-name",
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return t.ServerName })
		},
		set: func(p *envconfig.ClientConfigProfile, v string) { tlsOf(p).ServerName = v }},
	{key: "tls.disable_host_verification", env: "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", flag: "temporal-tls-disable-host-verification",
		get: func(c Config) string {
			return tlsField(c, func(t *envconfig.ClientConfigTLS) string { return onOff(t.DisableHostVerification) })
		},
		set: func(p *envconfig.ClientConfigProfile, v string) { tlsOf(p).DisableHostVerification = v == "true" }},
	{key: "authority", env: "TEMPORAL_CLIENT_AUTHORITY",
		get: func(c Config) string { return c.Temporal.Authority }},
	{key: "grpc_meta", env: "TEMPORAL_GRPC_META_*",
		get: func(c Config) string { return formatMeta(c.Temporal.GRPCMeta) }},
}

// Names of the file and profile settings, which choose where the rest is
// read from.
const (
	EnvTemporalConfigFile = "TEMPORAL_CONFIG_FILE"
	EnvTemporalProfile    = "TEMPORAL_PROFILE"
)

// temporalFlags binds the Temporal connection flags. Their values are
// read back in applyTemporal, over the profile and the environment.
func (c *Config) temporalFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Temporal.ConfigFile, "temporal-config-file", c.Temporal.ConfigFile,
		"TOML file of temporal CLI profiles (env "+EnvTemporalConfigFile+"; default "+defaultConfigFile()+")")
	fs.StringVar(&c.Temporal.Profile, "temporal-profile", c.Temporal.Profile,
		"profile of the TOML file to use (env "+EnvTemporalProfile+"; default \"default\")")
	fs.Bool("temporal-tls", false, "use TLS to reach Temporal; on by itself with any TLS setting or an API key (env TEMPORAL_TLS)")
	fs.String("temporal-tls-ca-path", "", "PEM file of the CA that signed Temporal's certificate (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	fs.String("temporal-tls-cert-path", "", "PEM file of the client certificate for mTLS (env TEMPORAL_TLS_CLIENT_CERT_PATH)")
	fs.String("temporal-tls-key-path", "", "PEM file of the client certificate's key (env TEMPORAL_TLS_CLIENT_KEY_PATH)")
	fs.String("temporal-tls-server-name", "", "name Temporal's certificate must carry, when not the address's host (env TEMPORAL_TLS_SERVER_NAME)")
	fs.Bool("temporal-tls-disable-host-verification", false, "accept a Temporal certificate that names another host (env TEMPORAL_TLS_DISABLE_HOST_VERIFICATION)")
}

func defaultConfigFile() string {
	if p := envconfig.DefaultConfigFilePath(); p != "" {
		return p
	}
	return "none"
}

// isTemporalFlag says whether applyTemporal, not the generic environment
// lookup, sets flag name.
func isTemporalFlag(name string) bool {
	if name == "temporal-config-file" || name == "temporal-profile" {
		return true
	}
	return slices.ContainsFunc(temporalSettings, func(s temporalSetting) bool { return s.flag == name })
}

// applyTemporal resolves the Temporal connection: defaults, then the TOML
// profile, then the environment (read by envconfig itself, so every
// variable the SDK knows works), then flags; and records where each
// setting came from.
func (c *Config) applyTemporal(fs *pflag.FlagSet) error {
	fileFrom, profileFrom := c.locateProfile(fs)
	prof, inFile, err := c.loadProfile(fileFrom, profileFrom)
	if err != nil {
		return err
	}
	fromFile := detachProfile(&prof)
	if err := prof.ApplyEnvVars(environment{}); err != nil {
		return fmt.Errorf("temporal environment: %w", err)
	}
	for _, s := range temporalSettings {
		if f := changedFlag(fs, s.flag); f != nil && s.set != nil {
			s.set(&prof, f.Value.String())
		}
	}
	def := Default()
	c.TemporalAddress = cmpOr(prof.Address, def.TemporalAddress)
	c.Namespace = cmpOr(prof.Namespace, def.Namespace)
	c.Temporal.APIKey, c.Temporal.TLS = prof.APIKey, prof.TLS
	c.Temporal.GRPCMeta, c.Temporal.Authority = prof.GRPCMeta, prof.Authority

	from := c.temporalSources(fs, fromFile, inFile)
	from["config_file"], from["profile"] = fileFrom, profileFrom
	c.From.Temporal = from
	c.From.TemporalAddress = from["address"]
	return nil
}

// changedFlag is the flag name of fs if it was set, else nil.
func changedFlag(fs *pflag.FlagSet, name string) *pflag.Flag {
	if f := fs.Lookup(name); f != nil && f.Changed {
		return f
	}
	return nil
}

// locateProfile takes the TOML file and the profile name from the
// environment unless flags gave them, and says where each came from.
func (c *Config) locateProfile(fs *pflag.FlagSet) (fileFrom, profileFrom string) {
	fileFrom = "default"
	if changedFlag(fs, "temporal-config-file") != nil {
		fileFrom = "--temporal-config-file"
	} else if v := os.Getenv(EnvTemporalConfigFile); v != "" {
		c.Temporal.ConfigFile, fileFrom = v, EnvTemporalConfigFile
	}
	profileFrom = "default"
	if changedFlag(fs, "temporal-profile") != nil {
		profileFrom = "--temporal-profile"
	} else if v := os.Getenv(EnvTemporalProfile); v != "" {
		c.Temporal.Profile, profileFrom = v, EnvTemporalProfile
	}
	return fileFrom, profileFrom
}

// loadProfile reads the chosen profile of the TOML file, and says where it
// is for Config.From. Without a file, or without the default profile in
// it, the profile is empty; a named profile must be there.
func (c *Config) loadProfile(fileFrom, profileFrom string) (prof envconfig.ClientConfigProfile, inFile string, err error) {
	file := c.Temporal.ConfigFile
	if file == "" {
		file = envconfig.DefaultConfigFilePath()
	}
	name := c.Temporal.Profile
	if name == "" {
		name = envconfig.DefaultConfigFileProfile
	}
	if file != "" {
		conf, err := envconfig.LoadClientConfig(envconfig.LoadClientConfigOptions{ConfigFilePath: file})
		if err != nil {
			return prof, "", fmt.Errorf("temporal config file %s (from %s): %w", file, fileFrom, err)
		}
		if p := conf.Profiles[name]; p != nil {
			prof = *p
		} else if c.Temporal.Profile != "" {
			return prof, "", fmt.Errorf("temporal profile %q (from %s) is not in %s (from %s); it has %s",
				name, profileFrom, file, fileFrom, listOrNone(slices.Sorted(maps.Keys(conf.Profiles))))
		}
	}
	return prof, fmt.Sprintf("profile %q of %s", name, file), nil
}

// detachProfile returns what the profile set, as a Config, before the
// environment and flags write over it, and gives prof a TLS and gRPC
// metadata of its own for them to change.
func detachProfile(prof *envconfig.ClientConfigProfile) Config {
	var fromFile Config
	fromFile.TemporalAddress, fromFile.Namespace = prof.Address, prof.Namespace
	fromFile.Temporal = Temporal{APIKey: prof.APIKey, GRPCMeta: prof.GRPCMeta, Authority: prof.Authority}
	if prof.TLS != nil {
		t := *prof.TLS
		fromFile.Temporal.TLS = &t
		prof.TLS = &t // a copy of our own, for the environment and flags to change
	}
	prof.GRPCMeta = maps.Clone(prof.GRPCMeta)
	return fromFile
}

// temporalSources says where each Temporal setting came from: its flag,
// its environment variable, the profile (fromFile, found at inFile), the
// TLS settings that imply TLS, or the default.
func (c *Config) temporalSources(fs *pflag.FlagSet, fromFile Config, inFile string) map[string]string {
	from := map[string]string{}
	for _, s := range temporalSettings {
		switch {
		case s.flag != "" && changedFlag(fs, s.flag) != nil:
			from[s.key] = "--" + s.flag
		case envSet(s.env):
			from[s.key] = strings.TrimSuffix(s.env, "*")
		case s.key == "tls" && fromFile.Temporal.TLS != nil, s.key != "tls" && s.get(fromFile) != "":
			from[s.key] = inFile
		case s.key == "tls" && c.Temporal.TLSOn():
			from[s.key] = "implied by the TLS settings or API key"
		default:
			from[s.key] = "default"
		}
	}
	return from
}

// environment is the process environment as envconfig reads it, but for
// TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE: spiderpool has always taken
// those empty as unset, and scripts clear them so.
type environment struct{}

func (environment) Environ() []string { return os.Environ() }

func (environment) LookupEnv(name string) (string, bool) {
	v, ok := os.LookupEnv(name)
	if v == "" && (name == EnvTemporalAddress || name == EnvNamespace) {
		return "", false
	}
	return v, ok
}

// envSet says whether environment variable name is set, as envconfig
// sees it; name may end in * for a prefix.
func envSet(name string) bool {
	if prefix, ok := strings.CutSuffix(name, "*"); ok {
		return slices.ContainsFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, prefix) })
	}
	_, ok := environment{}.LookupEnv(name)
	return ok
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "no profiles"
	}
	return "profiles " + strings.Join(names, ", ")
}

func formatMeta(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := m[k]
		if sensitiveHeader(k) {
			v = masked
		}
		parts[i] = k + "=" + v
	}
	return strings.Join(parts, ",")
}

// sensitiveHeader says whether a gRPC header likely carries a credential.
func sensitiveHeader(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"auth", "key", "token", "secret", "password", "cookie"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// validateTemporal checks what can be checked without reading files: a
// client certificate needs its key, a path excludes data.
func (c *Config) validateTemporal() error {
	t := c.Temporal.TLS
	if t == nil || t.Disabled {
		return nil
	}
	var errs []error
	hasCert := t.ClientCertPath != "" || len(t.ClientCertData) > 0
	hasKey := t.ClientKeyPath != "" || len(t.ClientKeyData) > 0
	if hasCert != hasKey {
		errs = append(errs, fmt.Errorf("temporal TLS: a client certificate and its key go together, got only the %s (%s)",
			map[bool]string{true: "certificate", false: "key"}[hasCert], c.tlsSources()))
	}
	for _, pair := range [][2]string{{"tls.server_ca_cert_path", "tls.server_ca_cert_data"},
		{"tls.client_cert_path", "tls.client_cert_data"}, {"tls.client_key_path", "tls.client_key_data"}} {
		if c.settingValue(pair[0]) != "" && c.settingValue(pair[1]) != "" {
			errs = append(errs, fmt.Errorf("temporal TLS: %s (from %s) and %s (from %s) exclude each other",
				pair[0], c.From.Of(pair[0]), pair[1], c.From.Of(pair[1])))
		}
	}
	return errors.Join(errs...)
}

func (c Config) settingValue(key string) string {
	for _, s := range temporalSettings {
		if s.key == key {
			return s.get(c)
		}
	}
	return ""
}
