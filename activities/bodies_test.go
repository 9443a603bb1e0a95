package activities

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBodyRequestsThatAreWrongSayWhy: a POST of something other than a
// JSON array of hex tokens, or of too many, is refused before Postgres is
// asked, with the reason.
func TestBodyRequestsThatAreWrongSayWhy(t *testing.T) {
	many := "[" + strings.Repeat(`"ab",`, 1000) + `"ab"]`
	for _, c := range []struct{ body, want string }{
		{`{"tokens":["ab"]}`, "want a JSON array of body tokens"},
		{`["ab", "x y"]`, `token 1, "x y"`},
		{`[""]`, "token 0"},
		{many, "1001 tokens: at most 1000"},
	} {
		rec := httptest.NewRecorder()
		BodyHandler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, BodyPath, strings.NewReader(c.body)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("POST %.40s: %d %q, want 400 saying %q", c.body, rec.Code, rec.Body.String(), c.want)
		}
	}
}
