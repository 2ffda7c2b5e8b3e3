package committed

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"graveler/graveler"
)

func buildRange(recs []graveler.ValueRecord, blockSize int) []byte {
	b := newRangeBuilder(blockSize, nil)
	for _, r := range recs {
		b.add(r.Key, r.Identity, r.Data)
	}
	return b.finish()
}

func TestRangeRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 17, 500} {
		for _, bs := range []int{1, 64, 32 << 10} {
			recs := numbered(n, "id")
			recs[0].Data = nil // empty fields survive
			data := buildRange(recs, bs)
			f, err := parseRange(data)
			if err != nil {
				t.Fatalf("n=%d bs=%d: %v", n, bs, err)
			}
			if f.count != n {
				t.Fatalf("count %d, want %d", f.count, n)
			}
			if bs == 1 && len(f.blocks) != n {
				t.Fatalf("%d blocks with one record each, want %d", len(f.blocks), n)
			}
			if err := sameRecords(collect(t, newRangeIter(f)), recs); err != nil {
				t.Fatalf("n=%d bs=%d: %v", n, bs, err)
			}
			if !bytes.Equal(buildRange(recs, bs), data) {
				t.Fatal("encoding is not deterministic")
			}
		}
	}
}

func TestRangeCorruption(t *testing.T) {
	data := buildRange(numbered(20, "id"), 64)
	if _, err := parseRange(data); err != nil {
		t.Fatal(err)
	}
	// Every byte is covered by a checksum: any single flipped bit is caught.
	for i := range data {
		for _, bit := range []byte{0x01, 0x80} {
			bad := bytes.Clone(data)
			bad[i] ^= bit
			if _, err := parseRange(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip %#x at byte %d of %d: %v", bit, i, len(data), err)
			}
		}
	}
	for _, n := range []int{0, 1, footerLen - 1, footerLen, len(data) - 1} {
		if _, err := parseRange(data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := parseRange(append(bytes.Clone(data), 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func TestRangeSeekGE(t *testing.T) {
	// Keys k00, k02, ..., k98 in blocks of a few records.
	var recs []graveler.ValueRecord
	for i := 0; i < 100; i += 2 {
		recs = append(recs, rec(fmt.Sprintf("k%02d", i), "id", "v"))
	}
	f, err := parseRange(buildRange(recs, 20))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.blocks) < 5 {
		t.Fatalf("%d blocks", len(f.blocks))
	}
	cases := []struct {
		seek, want string // want "" = end
	}{
		{"", "k00"}, {"a", "k00"}, {"k", "k00"}, {"k00", "k00"}, {"k00\x00", "k02"},
		{"k01", "k02"}, {"k5", "k50"}, {"k51", "k52"}, {"k98", "k98"}, {"k981", ""}, {"k99", ""}, {"z", ""},
	}
	// Also every block's first and last key and just past them.
	for _, b := range f.blocks {
		cases = append(cases, struct{ seek, want string }{string(b.first), string(b.first)}, struct{ seek, want string }{string(b.last), string(b.last)})
	}
	it := newRangeIter(f)
	for _, c := range cases {
		it.SeekGE(graveler.Key(c.seek))
		ok := it.Next()
		switch {
		case c.want == "" && ok:
			t.Fatalf("SeekGE(%q) = %q, want end", c.seek, it.Value().Key)
		case c.want != "" && (!ok || string(it.Value().Key) != c.want):
			t.Fatalf("SeekGE(%q) = %v, want %q", c.seek, it.Value(), c.want)
		}
		if ok {
			// Iteration continues in order from there.
			prev := it.Value().Key.Copy()
			if it.Next() && bytes.Compare(prev, it.Value().Key) >= 0 {
				t.Fatalf("after SeekGE(%q): %q then %q", c.seek, prev, it.Value().Key)
			}
		}
	}
}
