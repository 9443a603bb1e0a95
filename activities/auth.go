package activities

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// RequireSecret serves h only to requests that present secret as a
// bearer token (Authorization: Bearer <secret>); any other gets 401 and
// nothing of h, not even whether a token names a body. The comparison
// takes the same time whatever the guess.
func RequireSecret(secret string, h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(secret))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || secret == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="spiderpool node"`)
			http.Error(w, "unauthorized: present the node secret (Authorization: Bearer, SPIDERPOOL_NODE_SECRET)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
