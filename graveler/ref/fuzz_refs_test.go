package ref_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"graveler/graveler"
	"graveler/graveler/ref"
)

// render is the canonical text of a parsed reference: every modifier with
// an explicit count.
func render(raw graveler.RawRef) string {
	var b strings.Builder
	b.WriteString(raw.BaseRef)
	for _, m := range raw.Modifiers {
		switch m.Type {
		case graveler.RefModTypeAt:
			b.WriteByte('@')
		case graveler.RefModTypeTilde:
			b.WriteString("~" + strconv.Itoa(m.Value))
		case graveler.RefModTypeCaret:
			b.WriteString("^" + strconv.Itoa(m.Value))
		}
	}
	return b.String()
}

// FuzzParseRef: reference expressions come straight from API requests.
// ParseRef must never panic, must reject with ErrInvalidRef (an
// INVALID_ARGUMENT), and an accepted expression must re-parse from its
// canonical rendering to the same value.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"main", "main~", "main~2^2", "main@", "main@~1", "v1.0^0", "abcd", "abc", strings.Repeat("f", 64) + "~3",
		"main~99999999999999999999", "main@@", "~1", "^", "@", "a/b", "main~1@", "HEAD", "main^-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := ref.ParseRef(graveler.Ref(s))
		if err != nil {
			if !errors.Is(err, graveler.ErrInvalidRef) || !errors.Is(err, graveler.ErrInvalidArgument) {
				t.Fatalf("ParseRef(%q): %v does not wrap ErrInvalidRef and ErrInvalidArgument", s, err)
			}
			return
		}
		if raw.BaseRef == "" || strings.ContainsAny(raw.BaseRef, "~^@") {
			t.Fatalf("ParseRef(%q): base %q", s, raw.BaseRef)
		}
		if !strings.HasPrefix(s, raw.BaseRef) {
			t.Fatalf("ParseRef(%q): base %q is not a prefix", s, raw.BaseRef)
		}
		for i, m := range raw.Modifiers {
			if m.Type == graveler.RefModTypeAt && i != 0 {
				t.Fatalf("ParseRef(%q): '@' at modifier %d", s, i)
			}
			if m.Value < 0 {
				t.Fatalf("ParseRef(%q): negative modifier %d", s, m.Value)
			}
		}
		again, err := ref.ParseRef(graveler.Ref(render(raw)))
		if err != nil {
			t.Fatalf("ParseRef(%q) = %+v renders %q, which fails: %v", s, raw, render(raw), err)
		}
		if render(again) != render(raw) || len(again.Modifiers) != len(raw.Modifiers) {
			t.Fatalf("ParseRef(%q): %+v re-parses to %+v", s, raw, again)
		}
	})
}

// FuzzDecodeRecords: the cleaner decodes whatever it finds in the store;
// a corrupt record must be ErrCorruptRecord or ErrUnknownFormat (both
// FAILED_PRECONDITION), never a panic.
func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x01})
	f.Add([]byte{0x08, 0x01, 0x12, 0x03, 'a', 'b', 'c'})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		corrupt := func(err error) bool {
			return errors.Is(err, ref.ErrCorruptRecord) || errors.Is(err, ref.ErrUnknownFormat)
		}
		if _, err := ref.DecodeRepository(data); err != nil && !corrupt(err) {
			t.Fatalf("DecodeRepository(%x): %v is neither ErrCorruptRecord nor ErrUnknownFormat", data, err)
		}
		if _, err := ref.DecodeBranch(data); err != nil && !corrupt(err) {
			t.Fatalf("DecodeBranch(%x): %v is neither ErrCorruptRecord nor ErrUnknownFormat", data, err)
		}
	})
}
