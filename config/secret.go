package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The node secret is what a processor presents to a node's --bodies-addr
// (Authorization: Bearer <secret>) to read page bodies and batches: nodes
// and processors share it, through the environment or a file, and it
// never travels in Temporal payloads or history (which carry only the
// per-page tokens, useless without it).
const (
	// EnvNodeSecret holds the secret itself.
	EnvNodeSecret = "SPIDERPOOL_NODE_SECRET"
	// EnvNodeSecretFile names a file holding it (--node-secret-file).
	EnvNodeSecretFile = "SPIDERPOOL_NODE_SECRET_FILE"
	// MinSecretLen is the shortest secret a node accepts.
	MinSecretLen = 16
)

// NodeSecret is the node secret: the first line of file when one is
// named, else of the file EnvNodeSecretFile names, else EnvNodeSecret's
// value; "" when none is set. A secret shorter than MinSecretLen is an
// error, as is a named file that cannot be read.
func NodeSecret(file string) (string, error) {
	if file == "" {
		file = os.Getenv(EnvNodeSecretFile)
	}
	secret, from := os.Getenv(EnvNodeSecret), EnvNodeSecret
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("node secret: %w", err)
		}
		secret, from = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]), file
	}
	if secret != "" && len(secret) < MinSecretLen {
		return "", fmt.Errorf("node secret from %s: %d characters, want at least %d (spiderpool node-secret makes one)", from, len(secret), MinSecretLen)
	}
	return secret, nil
}

// NewSecret is a random secret: 32 bytes, hex.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// WriteNodeSecret writes a new secret to file, readable by its owner
// only, unless the file exists already; it says whether it wrote one.
func WriteNodeSecret(file string) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return false, err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		_, err := NodeSecret(file) // an existing file must hold a usable secret
		return false, err
	}
	if err != nil {
		return false, err
	}
	if _, err := fmt.Fprintln(f, NewSecret()); err != nil {
		f.Close()
		return false, err
	}
	return true, f.Close()
}

// BodiesSecret is the secret the node serves --bodies-addr behind: Secret
// when set in code, else NodeSecret's. Serving bodies without one is an
// error that says what to set.
func (n Node) BodiesSecret() (string, error) {
	if n.Secret != "" {
		return n.Secret, nil
	}
	secret, err := NodeSecret(n.SecretFile)
	if err != nil {
		return "", fmt.Errorf("--bodies-addr: %w", err)
	}
	if secret == "" {
		return "", fmt.Errorf("--bodies-addr serves page bodies only to processors that present the node secret, and none is set: "+
			"set %s or --node-secret-file (at least %d characters; `spiderpool node-secret --file FILE` writes one), "+
			"or leave --bodies-addr out and processors get bodies inline", EnvNodeSecret, MinSecretLen)
	}
	return secret, nil
}
