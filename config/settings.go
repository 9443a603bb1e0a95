package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

// Setting is one setting as `spiderpool config print` shows it.
type Setting struct {
	// Name is the flag (--temporal-address), or for a Temporal setting
	// without one its profile key (temporal.api_key).
	Name string
	// Value is the effective value, secrets masked.
	Value string
	// From is where the value came from: a flag, an environment variable,
	// a temporal CLI profile, or "default".
	From string
	// Env is the environment variable that sets it.
	Env string
}

// masked stands in for a secret.
const masked = "xxxxx"

// Settings lists the configuration bound to fs after ApplyEnv: every flag,
// then the Temporal settings that have no flag but are set. Passwords in
// the database URL, the API key, the client key data and credential-like
// gRPC headers are masked.
func (c *Config) Settings(fs *pflag.FlagSet) []Setting {
	var out []Setting
	fs.VisitAll(func(f *pflag.Flag) {
		if !c.bound[f.Name] {
			return // a command's own flag, or --help
		}
		s := Setting{Name: "--" + f.Name, Value: f.Value.String(), From: SourceOf(f), Env: EnvName(f.Name)}
		switch f.Name {
		case "database-url":
			s.Value = RedactDatabaseURL(s.Value)
		case "temporal-config-file":
			s.Value, s.From = cmpOr(c.Temporal.ConfigFile, defaultConfigFile()), cmpOr(c.From.Of("config_file"), s.From)
		case "temporal-profile":
			s.Value, s.From = cmpOr(c.Temporal.Profile, "default"), cmpOr(c.From.Of("profile"), s.From)
		}
		for _, t := range temporalSettings {
			if t.flag == f.Name {
				s.Value, s.From = c.display(t), cmpOr(c.From.Of(t.key), s.From)
			}
		}
		out = append(out, s)
	})
	for _, t := range temporalSettings {
		if t.flag == "" && t.get(*c) != "" {
			out = append(out, Setting{Name: "temporal." + t.key, Value: c.display(t), From: cmpOr(c.From.Of(t.key), "default"), Env: t.env})
		}
	}
	return out
}

// display is a Temporal setting's value as shown: secrets masked, PEM data
// summarised.
func (c *Config) display(t temporalSetting) string {
	v := t.get(*c)
	switch {
	case v == "" && t.key == "tls.disable_host_verification":
		return "false"
	case v == "":
		return ""
	case t.secret:
		return masked
	case strings.HasSuffix(t.key, "_data"):
		return fmt.Sprintf("(PEM data, %d bytes)", len(v))
	}
	return v
}

// Redacted is a copy of c safe to print: the secrets Settings masks are
// masked here too.
func (c Config) Redacted() Config {
	c.DatabaseURL = RedactDatabaseURL(c.DatabaseURL)
	if c.Temporal.APIKey != "" {
		c.Temporal.APIKey = masked
	}
	if c.Temporal.TLS != nil {
		t := *c.Temporal.TLS
		if len(t.ClientKeyData) > 0 {
			t.ClientKeyData = []byte(masked)
		}
		c.Temporal.TLS = &t
	}
	if len(c.Temporal.GRPCMeta) > 0 {
		meta := make(map[string]string, len(c.Temporal.GRPCMeta))
		for k, v := range c.Temporal.GRPCMeta {
			if sensitiveHeader(k) {
				v = masked
			}
			meta[k] = v
		}
		c.Temporal.GRPCMeta = meta
	}
	return c
}

// dsnPassword finds password=... and sslpassword=... in a key=value
// connection string, quoted or not.
var dsnPassword = regexp.MustCompile(`(?i)\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactDatabaseURL masks the passwords of a Postgres connection string,
// URL (postgres://u:pw@h/db?sslpassword=...) or key=value
// ("host=h password=pw") alike, leaving the rest (sslmode, sslrootcert)
// readable.
func RedactDatabaseURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// A key=value string, or a URL Go cannot parse (a bad port, a raw
		// space in the password), shown as given: mask its passwords all
		// the same.
		raw = unparsedURLPassword.ReplaceAllString(raw, "${1}"+masked+"@")
		return dsnPassword.ReplaceAllString(raw, "${1}"+masked)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), masked)
		}
	}
	u.RawQuery = queryPassword.ReplaceAllString(u.RawQuery, "${1}"+masked)
	return u.String()
}

// unparsedURLPassword finds the password of postgres://user:password@,
// to the last @: an unparsed password may hold one.
var unparsedURLPassword = regexp.MustCompile(`(?is)^(\s*postgres(?:ql)?://[^:@/]*:).*@`)

// queryPassword finds password= and sslpassword= in a URL's query.
var queryPassword = regexp.MustCompile(`(?i)((?:^|&)(?:ssl)?password=)[^&]*`)
