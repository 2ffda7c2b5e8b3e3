package staging

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"graveler/graveler"
	"graveler/graveler/staging/stagingpb"
)

func TestEncodeMatchesGenerated(t *testing.T) {
	cases := []struct {
		name string
		v    *graveler.Value
		pb   *stagingpb.Entry
	}{
		{"tombstone", nil, &stagingpb.Entry{FormatVersion: valueFormat, Tombstone: true}},
		{"identity only", &graveler.Value{Identity: []byte("id")}, &stagingpb.Entry{FormatVersion: valueFormat, Identity: []byte("id")}},
		{"value", &graveler.Value{Identity: []byte("id"), Data: bytes.Repeat([]byte{0, 0xff}, 300)},
			&stagingpb.Entry{FormatVersion: valueFormat, Identity: []byte("id"), Data: bytes.Repeat([]byte{0, 0xff}, 300)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := encode(c.v)
			want, err := proto.Marshal(c.pb)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encode = %x, proto.Marshal = %x", got, want)
			}
			if cap(got) != len(got) {
				t.Errorf("encode allocated %d bytes for %d", cap(got), len(got))
			}
			var pb stagingpb.Entry
			if err := proto.Unmarshal(got, &pb); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&pb, c.pb) {
				t.Errorf("proto.Unmarshal(encode) = %v, want %v", &pb, c.pb)
			}
			v, reset, err := decode(want)
			if err != nil || reset {
				t.Fatal(reset, err)
			}
			if (v == nil) != (c.v == nil) || v != nil && (!bytes.Equal(v.Identity, c.v.Identity) || !bytes.Equal(v.Data, c.v.Data)) {
				t.Errorf("decode = %+v, want %+v", v, c.v)
			}
		})
	}
}

// TestResetRecord: a reset record is version 2 (a release reading only
// version 1 refuses it), matches the generated code, and decodes as a
// reset, not as a value or a tombstone.
func TestResetRecord(t *testing.T) {
	want, err := proto.Marshal(&stagingpb.Entry{FormatVersion: resetFormat, Reset_: true})
	if err != nil {
		t.Fatal(err)
	}
	got := encodeReset()
	if !bytes.Equal(got, want) {
		t.Fatalf("encodeReset = %x, proto.Marshal = %x", got, want)
	}
	v, reset, err := decode(got)
	if err != nil || !reset || v != nil {
		t.Fatalf("decode(reset) = %v, %v, %v", v, reset, err)
	}
	if resetFormat <= valueFormat || resetFormat > FormatVersion {
		t.Fatalf("reset records are version %d; values %d, newest read %d", resetFormat, valueFormat, FormatVersion)
	}
}

func TestDecodeAliasesInput(t *testing.T) {
	b := encode(&graveler.Value{Identity: []byte("identity"), Data: []byte("data")})
	v, _, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	within := func(s []byte) bool {
		for i := range b {
			if len(s) > 0 && &b[i] == &s[0] {
				return true
			}
		}
		return false
	}
	if !within(v.Identity) || !within(v.Data) {
		t.Error("decode copied the value instead of aliasing the record")
	}
	// Appending to one field must not overwrite the next.
	_ = append(v.Identity, "XXXX"...)
	if string(v.Data) != "data" {
		t.Errorf("append to Identity overwrote Data: %q", v.Data)
	}
}

func TestDecodeErrors(t *testing.T) {
	marshal := func(pb *stagingpb.Entry) []byte {
		b, err := proto.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := encode(&graveler.Value{Identity: []byte("id"), Data: []byte("data")})
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"newer format", marshal(&stagingpb.Entry{FormatVersion: FormatVersion + 1, Identity: []byte("id")}), ErrUnknownFormat},
		{"no format version", marshal(&stagingpb.Entry{Identity: []byte("id")}), ErrCorruptRecord},
		{"empty", nil, ErrCorruptRecord},
		{"truncated", good[:len(good)-1], ErrCorruptRecord},
		{"garbage", []byte{0xff, 0xff, 0xff}, ErrCorruptRecord},
		{"field number 0", []byte{0x00, 0x01}, ErrCorruptRecord},
		{"tombstone with value", marshal(&stagingpb.Entry{FormatVersion: 1, Tombstone: true, Data: []byte("x")}), ErrCorruptRecord},
		{"value without identity", marshal(&stagingpb.Entry{FormatVersion: 1, Data: []byte("x")}), ErrCorruptRecord},
		{"reset in version 1", marshal(&stagingpb.Entry{FormatVersion: 1, Reset_: true}), ErrCorruptRecord},
		{"reset with value", marshal(&stagingpb.Entry{FormatVersion: 2, Reset_: true, Identity: []byte("id")}), ErrCorruptRecord},
		{"reset tombstone", marshal(&stagingpb.Entry{FormatVersion: 2, Reset_: true, Tombstone: true}), ErrCorruptRecord},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := decode(c.b)
			if !errors.Is(err, c.want) || !errors.Is(err, graveler.ErrFailedPrecondition) {
				t.Errorf("decode(%x) = %v, want %v", c.b, err, c.want)
			}
		})
	}
}

func TestDecodeSkipsUnknownFields(t *testing.T) {
	b := encode(&graveler.Value{Identity: []byte("id"), Data: []byte("data")})
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("future"))
	// A known field with an unexpected wire type is an unknown field to proto.
	b = protowire.AppendTag(b, fieldData, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	v, _, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Identity) != "id" || string(v.Data) != "data" {
		t.Errorf("decode = %+v", v)
	}
}

// FuzzParse checks the hand-written parser against the generated code: for
// any input, both fail or both give the same fields.
func FuzzParse(f *testing.F) {
	f.Add(encode(nil))
	f.Add(encode(&graveler.Value{Identity: []byte("id"), Data: []byte("data")}))
	f.Add(encodeReset())
	f.Add([]byte{0x08, 0x01, 0x08, 0x02, 0x20, 0x00})
	f.Add([]byte{0x0b, 0x0c})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parse(b)
		var pb stagingpb.Entry
		perr := proto.Unmarshal(b, &pb)
		if (err == nil) != (perr == nil) {
			t.Fatalf("parse(%x) err = %v, proto.Unmarshal err = %v", b, err, perr)
		}
		if err != nil {
			return
		}
		if r.formatVersion != pb.GetFormatVersion() || !bytes.Equal(r.identity, pb.GetIdentity()) ||
			!bytes.Equal(r.data, pb.GetData()) || r.tombstone != pb.GetTombstone() || r.reset != pb.GetReset_() {
			t.Fatalf("parse(%x) = %+v, proto.Unmarshal = %v", b, r, &pb)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	v := &graveler.Value{Identity: bytes.Repeat([]byte("i"), 64), Data: bytes.Repeat([]byte("d"), 256)}
	b.Run("protowire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = encode(v)
		}
	})
	b.Run("proto.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = proto.Marshal(&stagingpb.Entry{FormatVersion: valueFormat, Identity: v.Identity, Data: v.Data})
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	rec := encode(&graveler.Value{Identity: bytes.Repeat([]byte("i"), 64), Data: bytes.Repeat([]byte("d"), 256)})
	b.Run("protowire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decode(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var pb stagingpb.Entry
			if err := proto.Unmarshal(rec, &pb); err != nil {
				b.Fatal(err)
			}
			_ = &graveler.Value{Identity: pb.Identity, Data: pb.Data}
		}
	})
}
