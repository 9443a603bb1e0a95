package store

import (
	"strconv"
	"strings"
	"testing"
)

// TestBodyTokensNameTheirPage: a token bodyToken makes has the length the
// legacy-token predicate (and its index, migration 0016) leaves out, and
// gives back its page's id; a token of another length names no page.
func TestBodyTokensNameTheirPage(t *testing.T) {
	if !strings.HasSuffix(legacyToken, "<> "+strconv.Itoa(bodyTokenLen)) {
		t.Errorf("legacy-token predicate %q does not leave out tokens of %d characters", legacyToken, bodyTokenLen)
	}
	for _, id := range []int64{1, 42, 1 << 40} {
		tok, err := bodyToken(id)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := bodyTokenID(tok); len(tok) != bodyTokenLen || !ok || got != id {
			t.Errorf("bodyToken(%d) = %q: names %d (%v), want %d in %d characters", id, tok, got, ok, id, bodyTokenLen)
		}
	}
	if _, ok := bodyTokenID("0123456789abcdef0123456789abcdef"); ok {
		t.Error("a 32-character token written before tokens carried an id names a page")
	}
}
