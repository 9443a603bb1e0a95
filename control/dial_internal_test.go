package control

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"

	"github.com/spiderpool/spiderpool/config"
)

// TestTLSHintNeverAdvisesSendingAnAPIKeyInClear: a server that does not
// speak TLS, dialled with an API key, gets advice that keeps TLS on: the
// key would otherwise go in clear. Without a key, turning TLS off is a
// fair suggestion.
func TestTLSHintNeverAdvisesSendingAnAPIKeyInClear(t *testing.T) {
	notTLS := fmt.Errorf("dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"})
	var withKey config.Config
	withKey.Temporal.APIKey = "secret-key"
	hint := tlsHint(withKey, &tls.Config{}, notTLS)
	if strings.Contains(hint, "TLS=false") || strings.Contains(hint, "tls=false") || !strings.Contains(hint, "API key") {
		t.Errorf("with an API key the hint is %q: it must say the key needs TLS, never to turn TLS off", hint)
	}
	if hint := tlsHint(config.Config{}, &tls.Config{}, notTLS); !strings.Contains(hint, "TEMPORAL_TLS=false") {
		t.Errorf("without an API key the hint is %q: want the way to turn TLS off", hint)
	}
}
