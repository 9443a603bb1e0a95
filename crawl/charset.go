package crawl

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/unicode"
)

// Document is an HTML body made readable: its bytes as UTF-8, and the
// encoding it was written in, which links' queries are encoded in.
type Document struct {
	// UTF8 is the body decoded to UTF-8.
	UTF8 []byte
	// Encoding is the body's own encoding; nil when it is UTF-8.
	Encoding encoding.Encoding
	// Charset names Encoding as the WHATWG Encoding standard does
	// ("windows-1251", "shift_jis", "utf-8").
	Charset string
}

// DecodeHTML finds an HTML body's encoding as a browser does (WHATWG HTML
// "determining the character encoding"): a byte-order mark, then the
// charset of contentType, then a <meta> charset in the first 1024 bytes,
// then a guess (UTF-8 if the bytes are valid UTF-8, else windows-1252, the
// web's default for a page that says nothing) and decodes it to UTF-8.
// Titles and links read from the raw bytes of a Shift_JIS or windows-1251
// page would be mojibake, and its links would point elsewhere.
func DecodeHTML(body []byte, contentType string) Document {
	enc, name, _ := charset.DetermineEncoding(body, contentType)
	if enc == nil || enc == encoding.Nop || enc == unicode.UTF8 || name == "utf-8" {
		return Document{UTF8: body, Charset: "utf-8"}
	}
	out, err := enc.NewDecoder().Bytes(body)
	if err != nil {
		// The decoders replace what they cannot map; an error here is a
		// broken decoder, and the raw bytes are the better guess.
		return Document{UTF8: body, Charset: "utf-8"}
	}
	return Document{UTF8: out, Encoding: enc, Charset: name}
}

// EncodeQuery rewrites the query of ref, a link read from a document in
// enc, as the WHATWG URL parser does for such a document: each non-ASCII
// character of the query is encoded in enc and percent-encoded (a
// character enc cannot write becomes "%26%23" code ";" percent-encoded,
// as a browser sends it). The path and fragment are left to the URL
// parser, which encodes them as UTF-8 whatever the document's encoding.
// With enc nil (UTF-8) ref is returned as it is.
func EncodeQuery(ref string, enc encoding.Encoding) string {
	if enc == nil {
		return ref
	}
	q := strings.IndexByte(ref, '?')
	if q < 0 {
		return ref
	}
	if f := strings.IndexByte(ref, '#'); f >= 0 && f < q {
		return ref
	}
	end := len(ref)
	if f := strings.IndexByte(ref[q:], '#'); f >= 0 {
		end = q + f
	}
	query := ref[q+1 : end]
	if isASCII(query) {
		return ref
	}
	var b strings.Builder
	b.Grow(len(ref) + 2*len(query))
	b.WriteString(ref[:q+1])
	e := enc.NewEncoder()
	var buf [utf8.UTFMax]byte
	for _, r := range query {
		if r < utf8.RuneSelf {
			b.WriteRune(r)
			continue
		}
		n := utf8.EncodeRune(buf[:], r)
		out, err := e.Bytes(buf[:n])
		e.Reset()
		if err != nil || len(out) == 0 || bytes.Equal(out, []byte{0x1a}) {
			b.WriteString("%26%23" + strconv.Itoa(int(r)) + "%3B")
			continue
		}
		for _, c := range out {
			if c >= 0x80 || c <= ' ' || strings.IndexByte("\"#<>'", c) >= 0 {
				b.WriteString("%" + strings.ToUpper(strconv.FormatInt(int64(c)|0x100, 16)[1:]))
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteString(ref[end:])
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
