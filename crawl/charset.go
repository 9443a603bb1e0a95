package crawl

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
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
// then a guess from the bytes, and decodes the body to UTF-8. Titles and
// links read from the raw bytes of a Shift_JIS or windows-1251 page would
// be mojibake, and its links would point elsewhere.
func DecodeHTML(body []byte, contentType string) Document {
	enc, name, certain := charset.DetermineEncoding(body, contentType)
	if !certain && name == "windows-1252" && !declaresCharset(body) {
		enc, name = sniff(body)
	}
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

// declaresCharset says whether the <meta> prescan had anything to read:
// DetermineEncoding answers windows-1252 both for a page that declares it
// and for one that declares nothing.
func declaresCharset(body []byte) bool {
	head := body[:min(len(body), 1024)]
	return bytes.Contains(bytes.ToLower(head), []byte("charset"))
}

// sniff guesses the encoding of a page that declares none, as the HTML
// standard lets a browser do by frequency analysis. DetermineEncoding
// looks at the first 1024 bytes only, so a page whose text starts later
// would be read as windows-1252 even when it is UTF-8: the whole body is
// checked instead. Then Shift_JIS, whose byte pairs are strict enough to
// recognise, then windows-1251, whose text is runs of high bytes (words)
// where Western European text has them one at a time (accents);
// windows-1252 is the web's default for the rest.
func sniff(body []byte) (encoding.Encoding, string) {
	sample := body[:min(len(body), 64<<10)]
	if utf8.Valid(trimPartialRune(sample)) {
		return encoding.Nop, "utf-8"
	}
	if looksShiftJIS(sample) {
		return japanese.ShiftJIS, "shift_jis"
	}
	if looksCyrillic(sample) {
		return charmap.Windows1251, "windows-1251"
	}
	return charmap.Windows1252, "windows-1252"
}

// trimPartialRune drops a rune cut off by the end of a sample.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// looksShiftJIS: every high byte is half-width katakana or part of a valid
// double-byte pair, pairs are most of them, and most pairs lead with
// 0x81-0x9F (kana and common kanji). Western text read as pairs would lead
// with accented letters (0xE0-0xFC), and soon fail on one followed by a
// space or a digit.
func looksShiftJIS(b []byte) bool {
	pairs, singles, common := 0, 0, 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c < 0x80:
		case c >= 0xA1 && c <= 0xDF:
			singles++
		case c >= 0x81 && c <= 0x9F || c >= 0xE0 && c <= 0xFC:
			if i+1 == len(b) {
				break // cut off by the sample
			}
			t := b[i+1]
			if t < 0x40 || t == 0x7F || t > 0xFC {
				return false
			}
			pairs++
			if c <= 0x9F {
				common++
			}
			i++
		default:
			return false
		}
	}
	return pairs > 0 && pairs >= 2*singles && 2*common >= pairs
}

// looksCyrillic: most high bytes are letters of windows-1251 (0xC0-0xFF,
// and Ё/ё) in runs of three or more, as words of Russian are.
func looksCyrillic(b []byte) bool {
	high, inWords, run := 0, 0, 0
	letter := func(c byte) bool { return c >= 0xC0 || c == 0xA8 || c == 0xB8 }
	end := func() {
		if run >= 3 {
			inWords += run
		}
		run = 0
	}
	for _, c := range b {
		if c >= 0x80 {
			high++
		}
		if letter(c) {
			run++
		} else {
			end()
		}
	}
	end()
	return high > 0 && inWords*4 >= high*3
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
