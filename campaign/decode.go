package campaign

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// ParseSpec decodes a campaign spec as a person wrote it, strictly: unknown
// fields and values of the wrong type are errors naming the field
// ("spec.limits.max_pages: ..."), so a typo is named, never ignored. A
// document that is not JSON at all is a *SyntaxError saying where.
//
// It does not apply defaults or validate; see Spec.Normalize. The spec
// returned keeps the field errors too, so that Normalize reports them
// with its own: a person fixes every problem of a spec in one go.
func ParseSpec(b []byte) (Spec, error) {
	s, err := decodeSpec(b, true)
	s.decodeErr = err
	return s, err
}

// DecodeSpec decodes a spec a program wrote: a workflow's input, an
// activity's payload, the copy stored in Postgres. Values of the wrong type
// are errors as in ParseSpec, but a field this version does not know is
// not: a newer node may have written it, and during a rolling upgrade this
// node must still run the campaign. Such fields are kept aside and written
// out again by MarshalJSON, so a spec that passes through an older node
// (stored, carried across continue-as-new) keeps what the newer one set.
func DecodeSpec(b []byte) (Spec, error) {
	return decodeSpec(b, false)
}

// UnmarshalJSON decodes as DecodeSpec: it is what Temporal's payload
// converter calls for workflow inputs and activity payloads, which a node
// of another version may have written. A problem is kept, not returned, so
// that the workflow can fail with it as a clear, non-retryable error
// instead of the SDK failing the workflow task over and over.
func (s *Spec) UnmarshalJSON(b []byte) error {
	parsed, err := DecodeSpec(b)
	*s = parsed
	s.decodeErr = err
	return nil
}

// MarshalJSON writes the spec, with the fields DecodeSpec kept aside put
// back where they were. A spec without any is written exactly as
// encoding/json writes its fields.
func (s Spec) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(plainSpec(s))
	if err != nil || len(s.unknown) == 0 {
		return b, err
	}
	return mergeUnknown(b, s.unknown)
}

// plainSpec is Spec without its methods, for encoding/json.
type plainSpec Spec

// UnknownFields lists the fields the spec was decoded with that this
// version does not know ("spec.politeness.new_knob"), sorted. They are
// ignored here; newer nodes may act on them.
func (s Spec) UnknownFields() []string {
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+"."+k, sub)
			} else {
				out = append(out, prefix+"."+k)
			}
		}
	}
	walk("spec", s.unknown)
	slices.Sort(out)
	return out
}

var (
	specType        = reflect.TypeFor[Spec]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

func decodeSpec(b []byte, strict bool) (Spec, error) {
	var s Spec
	if err := checkSyntax(b); err != nil {
		return s, err
	}
	d := specDecoder{strict: strict}
	err := d.decode(nil, b, reflect.ValueOf(&s).Elem())
	s.unknown = d.unknown
	return s, err
}

// specDecoder decodes into a Spec, recursing into plain structs so that
// errors carry the full field path.
type specDecoder struct {
	strict bool
	// unknown holds the fields no struct has, as a tree of objects by
	// key: a leaf is the field's json.RawMessage, an inner node a
	// map[string]any of the object's unknown fields.
	unknown map[string]any
}

func fieldPath(keys []string) string {
	return strings.Join(append([]string{"spec"}, keys...), ".")
}

// decode decodes b into v, found at keys below the spec.
func (d *specDecoder) decode(keys []string, b []byte, v reflect.Value) error {
	t := v.Type()
	// An optional section (render, recrawl) is walked like the others,
	// so its unknown fields and bad values name their field too.
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && !t.Implements(unmarshalerType) {
		if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		return d.decode(keys, b, v.Elem())
	}
	// Spec itself is walked field by field; its UnmarshalJSON calls here.
	if t.Kind() != reflect.Struct || (t != specType && reflect.PointerTo(t).Implements(unmarshalerType)) {
		if err := json.Unmarshal(b, v.Addr().Interface()); err != nil {
			return &FieldError{Field: fieldPath(keys), Problem: describeJSONError(err)}
		}
		return nil
	}
	trimmed := bytes.TrimSpace(b)
	if bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return &FieldError{Field: fieldPath(keys), Problem: "want a JSON object, got " + kindOf(trimmed)}
	}
	byName := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		byName[name] = i
	}
	var errs []error
	for _, key := range sortedKeys(fields) {
		i, ok := byName[key]
		if !ok {
			if d.strict {
				errs = append(errs, &FieldError{Field: fieldPath(keys), Problem: fmt.Sprintf("unknown field %q", key)})
			} else {
				d.keep(keys, key, fields[key])
			}
			continue
		}
		if err := d.decode(append(slices.Clip(keys), key), fields[key], v.Field(i)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// keep records an unknown field for MarshalJSON.
func (d *specDecoder) keep(keys []string, key string, value json.RawMessage) {
	if d.unknown == nil {
		d.unknown = map[string]any{}
	}
	m := d.unknown
	for _, k := range keys {
		sub, ok := m[k].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[k] = sub
		}
		m = sub
	}
	m[key] = slices.Clone(value)
}

// mergeUnknown puts the unknown fields back into the JSON object b.
func mergeUnknown(b []byte, unknown map[string]any) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("spec: merging unknown fields back: %w", err)
	}
	for k, v := range unknown {
		switch v := v.(type) {
		case json.RawMessage:
			obj[k] = v
		case map[string]any:
			inner, ok := obj[k]
			if !ok {
				return nil, fmt.Errorf("spec: unknown fields below %q, which was not written", k)
			}
			merged, err := mergeUnknown(inner, v)
			if err != nil {
				return nil, err
			}
			obj[k] = merged
		}
	}
	return json.Marshal(obj)
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // errors come out in a stable order
	return keys
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("want %s, got %s", friendlyType(te.Type), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "invalid JSON: " + se.Error()
	}
	return err.Error()
}

func friendlyType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(friendlyType(t.Elem()), "a ")
	}
	return t.String()
}

// kindOf names the kind of a valid JSON value.
func kindOf(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// SyntaxError is a spec that is not JSON: it ends early, or has a
// character where JSON allows none. It says where, as a person's editor
// counts (line and column, from 1) and as a program does (byte offset).
type SyntaxError struct {
	Line, Column int
	Offset       int64 // bytes before the problem
	// EndsEarly is a document cut short; Unclosed then lists what is
	// still open, innermost first ("the list opened at line 1, column 10").
	EndsEarly bool
	Unclosed  []string
	Problem   string // encoding/json's words, for a bad character
}

func (e *SyntaxError) Error() string {
	where := fmt.Sprintf("line %d, column %d (byte %d)", e.Line, e.Column, e.Offset)
	if !e.EndsEarly {
		return fmt.Sprintf("spec: invalid JSON at %s: %s", where, e.Problem)
	}
	msg := "spec: the JSON ends early, at " + where
	if n := len(e.Unclosed); n > 0 {
		open := e.Unclosed[0]
		if n > 1 {
			open = strings.Join(e.Unclosed[:n-1], ", ") + " and " + e.Unclosed[n-1]
		}
		msg += ", with " + open + " not closed"
	}
	return msg
}

// checkSyntax finds where a document stops being JSON, before it is walked
// field by field: a truncated file would otherwise be reported as the
// wrong kind of value.
func checkSyntax(b []byte) error {
	if json.Valid(b) {
		return nil
	}
	if len(bytes.TrimFunc(b, isJSONSpace)) == 0 {
		return &FieldError{Field: "spec", Problem: `want a JSON object, got nothing (a spec is at least {"seeds":["https://example.org/"]})`}
	}
	var raw json.RawMessage
	err := json.Unmarshal(b, &raw)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return fmt.Errorf("spec: invalid JSON: %w", err)
	}
	off := se.Offset
	if se.Error() != "unexpected end of JSON input" {
		// Offset counts the offending byte; point at it.
		off = max(0, off-1)
		line, col := lineColumn(b, off)
		return &SyntaxError{Line: line, Column: col, Offset: off, Problem: se.Error()}
	}
	off = int64(len(bytes.TrimRightFunc(b, isJSONSpace)))
	line, col := lineColumn(b, off)
	return &SyntaxError{Line: line, Column: col, Offset: off, EndsEarly: true, Unclosed: unclosed(b[:off])}
}

func isJSONSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// lineColumn turns a byte offset into a 1-based line and column (in
// characters, as an editor shows them).
func lineColumn(b []byte, off int64) (line, col int) {
	before := b[:min(off, int64(len(b)))]
	line = 1 + bytes.Count(before, []byte("\n"))
	lastLine := before[bytes.LastIndexByte(before, '\n')+1:]
	return line, 1 + utf8.RuneCount(lastLine)
}

// unclosed lists the objects, lists and string still open at the end of
// a cut-short document, innermost first.
func unclosed(b []byte) []string {
	type open struct {
		what string
		at   int64
	}
	var stack []open
	inString, escaped := false, false
	var stringAt int64
	for i, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString, stringAt = true, int64(i)
		case c == '{':
			stack = append(stack, open{"object", int64(i)})
		case c == '[':
			stack = append(stack, open{"list", int64(i)})
		case (c == '}' || c == ']') && len(stack) > 0:
			stack = stack[:len(stack)-1]
		}
	}
	var out []string
	describe := func(what string, at int64) {
		line, col := lineColumn(b, at)
		out = append(out, fmt.Sprintf("the %s opened at line %d, column %d", what, line, col))
	}
	if inString {
		describe("string", stringAt)
	}
	for i := len(stack) - 1; i >= 0; i-- {
		describe(stack[i].what, stack[i].at)
	}
	return out
}
