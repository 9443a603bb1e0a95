package campaign

import (
	"errors"
	"strings"
	"testing"
)

// A spec cut short says that it ends early, where, and what is left open:
// not "want a JSON object, got a number", as when the walk met it first.
func TestTruncatedSpecSaysItEndsEarlyAndWhere(t *testing.T) {
	for _, tc := range []struct {
		doc        string
		line, col  int
		offset     int64
		unclosed   []string
		wantInText string
	}{
		{`{"seeds":["http://127.0.0.1:8080/"`, 1, 35, 34,
			[]string{"the list opened at line 1, column 10", "the object opened at line 1, column 1"},
			"spec: the JSON ends early, at line 1, column 35 (byte 34), with the list opened at line 1, column 10 and the object opened at line 1, column 1 not closed"},
		{"{\n  \"seeds\": [\"http://a/\"],\n  \"limits\": {\"max_pages\": 5\n\n", 3, 28, 55,
			[]string{"the object opened at line 3, column 13", "the object opened at line 1, column 1"}, "at line 3, column 28 (byte 55)"},
		{`{"seeds":["http://a/`, 1, 21, 20,
			[]string{"the string opened at line 1, column 11", "the list opened at line 1, column 10", "the object opened at line 1, column 1"},
			"the string opened at line 1, column 11, the list opened"},
		{`{"seeds":["http://é/`, 1, 21, 21, nil, "line 1, column 21 (byte 21)"}, // columns count characters
	} {
		_, err := ParseSpec([]byte(tc.doc))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Fatalf("%q: %v, want a *SyntaxError", tc.doc, err)
		}
		if !se.EndsEarly || se.Line != tc.line || se.Column != tc.col || se.Offset != tc.offset {
			t.Errorf("%q: %+v, want ends early at %d:%d (byte %d)", tc.doc, se, tc.line, tc.col, tc.offset)
		}
		if tc.unclosed != nil && strings.Join(se.Unclosed, "|") != strings.Join(tc.unclosed, "|") {
			t.Errorf("%q: unclosed %q, want %q", tc.doc, se.Unclosed, tc.unclosed)
		}
		if !strings.Contains(err.Error(), tc.wantInText) || strings.Contains(err.Error(), "got a number") {
			t.Errorf("%q: %q, want it to contain %q", tc.doc, err, tc.wantInText)
		}
	}
}

func TestBadCharacterIsPlaced(t *testing.T) {
	_, err := ParseSpec([]byte("{\"seeds\": [\"http://a/\"],\n \"limits\" {}}"))
	var se *SyntaxError
	if !errors.As(err, &se) || se.EndsEarly || se.Line != 2 || se.Column != 11 ||
		!strings.Contains(err.Error(), "invalid JSON at line 2, column 11 (byte 35): invalid character '{' after object key") {
		t.Fatalf("%v (%+v)", err, se)
	}
}

// Every problem of a spec comes out at once: values of the wrong type and
// unknown fields (found decoding) with the out-of-range values (found
// validating), and nothing twice for a value that did not decode.
func TestSpecReportsEveryProblemAtOnce(t *testing.T) {
	s, err := ParseSpec([]byte(`{"seeds":"http://a/","limit":{},"limits":{"max_pages":"ten","max_redirects":-3},
		"politeness":5,"retry":{"max_attempts":500},"scope":{"shard_by":"planet"}}`))
	if err == nil {
		t.Fatal("ParseSpec accepted wrong types")
	}
	_, err = s.Normalize()
	var got []string
	for _, e := range flatten(err) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a FieldError", e)
		}
		got = append(got, fe.Field)
	}
	want := []string{"spec", "spec.limits.max_pages", "spec.politeness", "spec.seeds", // decoding
		"spec.scope.shard_by", "spec.limits.max_redirects", "spec.retry.max_attempts"} // validating
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("fields named %q, want %q; error:\n%v", got, want, err)
	}
	// spec.seeds did not decode: "at least one seed" would be noise.
	if strings.Contains(err.Error(), "at least one seed") {
		t.Errorf("a seeds field of the wrong type is reported twice:\n%v", err)
	}
}

// A spec from a program (a workflow input) reports all its problems too.
func TestDecodedSpecReportsEveryProblemAtOnce(t *testing.T) {
	var s Spec
	if err := s.UnmarshalJSON([]byte(`{"seeds":["ftp://a/"],"retry":{"max_attempts":"3"}}`)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Normalize()
	if err == nil || !strings.Contains(err.Error(), "spec.retry.max_attempts: want an integer, got string") ||
		!strings.Contains(err.Error(), "spec.seeds[0]: \"ftp://a/\" is not an http(s) URL") {
		t.Fatalf("Normalize = %v, want the type error and the bad seed", err)
	}
}
