package activities

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
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

// TestServedBatchIsTheProcessRequest: a batch served with its headers as
// Postgres keeps them reads back as the campaign.ProcessRequest the pages
// make, headers and all.
func TestServedBatchIsTheProcessRequest(t *testing.T) {
	pages := []store.LeasedPage{
		{ID: 7, URL: "http://a.test/", FinalURL: "http://a.test/x", Depth: 2, Status: 200, ContentType: "text/html",
			Header: json.RawMessage(`{"Etag": ["\"v1\""], "Set-Cookie": ["a=1", "b=2"]}`), Length: 4, Body: []byte("body")},
		{ID: 8, URL: "http://a.test/empty", Status: 204, Header: json.RawMessage(`{}`)},
	}
	none := func() ([]string, error) { return nil, nil }
	want, err := processRequest("c", "p", pages, none)
	if err != nil {
		t.Fatal(err)
	}
	served, err := serve(store.Batch{CampaignID: "c", Processor: "p", Pages: pages}, none)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(served)
	if err != nil {
		t.Fatal(err)
	}
	var got campaign.ProcessRequest
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("served batch reads back as\n%+v\nwant\n%+v", got, want)
	}
	if c := got.Pages[0].Headers["Set-Cookie"]; len(c) != 2 || c[1] != "b=2" {
		t.Errorf("headers %v: want both cookies", got.Pages[0].Headers)
	}
}
