package staging

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"graveler/graveler"
)

// FormatVersion is the newest format version of the entry records this
// build reads. A reader accepts 1..FormatVersion and refuses newer versions
// with ErrUnknownFormat, so a rolled-back binary fails loudly instead of
// dropping fields it does not know.
const FormatVersion = 2

// The versions written: a value or a tombstone is written as version 1,
// which every release reads; a reset record as version 2, which a release
// reading only version 1 must refuse rather than take for a value.
const (
	valueFormat = 1
	resetFormat = 2
)

// Field numbers of stagingpb.Entry. The codec below writes and reads the
// message with protowire directly: encoding is one exactly sized
// allocation on the write path, and decoding slices the stored bytes
// instead of copying them. codec_test.go checks both against the code
// generated from stagingpb.proto.
const (
	fieldFormatVersion protowire.Number = 1
	fieldIdentity      protowire.Number = 2
	fieldData          protowire.Number = 3
	fieldTombstone     protowire.Number = 4
	fieldReset         protowire.Number = 5
)

// encode returns the stored record of v (nil: a tombstone). Its bytes are
// those proto.Marshal gives for the equivalent stagingpb.Entry.
func encode(v *graveler.Value) []byte {
	n := protowire.SizeTag(fieldFormatVersion) + protowire.SizeVarint(valueFormat)
	if v == nil {
		n += protowire.SizeTag(fieldTombstone) + protowire.SizeVarint(1)
	} else {
		if len(v.Identity) > 0 {
			n += protowire.SizeTag(fieldIdentity) + protowire.SizeBytes(len(v.Identity))
		}
		if len(v.Data) > 0 {
			n += protowire.SizeTag(fieldData) + protowire.SizeBytes(len(v.Data))
		}
	}
	b := make([]byte, 0, n)
	b = protowire.AppendTag(b, fieldFormatVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, valueFormat)
	if v == nil {
		b = protowire.AppendTag(b, fieldTombstone, protowire.VarintType)
		return protowire.AppendVarint(b, 1)
	}
	if len(v.Identity) > 0 {
		b = protowire.AppendTag(b, fieldIdentity, protowire.BytesType)
		b = protowire.AppendBytes(b, v.Identity)
	}
	if len(v.Data) > 0 {
		b = protowire.AppendTag(b, fieldData, protowire.BytesType)
		b = protowire.AppendBytes(b, v.Data)
	}
	return b
}

// encodeReset returns the stored reset record (stagingpb.Entry with reset
// set): what a reset of a key writes instead of removing its entry.
func encodeReset() []byte {
	b := make([]byte, 0, 2*(protowire.SizeTag(fieldReset)+1))
	b = protowire.AppendTag(b, fieldFormatVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, resetFormat)
	b = protowire.AppendTag(b, fieldReset, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

// record is a parsed stagingpb.Entry.
type record struct {
	formatVersion uint32
	identity      []byte
	data          []byte
	tombstone     bool
	reset         bool
}

// parse reads the wire format as proto.Unmarshal would into a
// stagingpb.Entry (last occurrence of a field wins; unknown fields and
// known fields of an unexpected wire type are skipped), except that bytes
// fields alias b, capped so that appending to one cannot overwrite another.
func parse(b []byte) (record, error) {
	var r record
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return record{}, protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return record{}, fmt.Errorf("field number %d out of range", num)
		}
		b = b[n:]
		switch {
		case num == fieldFormatVersion && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			r.formatVersion = uint32(v)
		case (num == fieldIdentity || num == fieldData) && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			v = v[:len(v):len(v)]
			if num == fieldIdentity {
				r.identity = v
			} else {
				r.data = v
			}
		case (num == fieldTombstone || num == fieldReset) && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			if num == fieldTombstone {
				r.tombstone = v != 0
			} else {
				r.reset = v != 0
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return record{}, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return r, nil
}

// decode returns the value of a stored record, nil for a tombstone; reset
// reports a reset record (the token stages nothing for the key; v is
// nil). The value's slices alias b, which the caller must not reuse.
func decode(b []byte) (v *graveler.Value, reset bool, err error) {
	r, err := parse(b)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	case r.formatVersion == 0:
		return nil, false, fmt.Errorf("%w: no format version", ErrCorruptRecord)
	case r.formatVersion > FormatVersion:
		return nil, false, fmt.Errorf("%w: entry record has format version %d, this build reads 1..%d", ErrUnknownFormat, r.formatVersion, FormatVersion)
	case r.reset:
		if r.formatVersion < resetFormat || r.tombstone || len(r.identity) > 0 || len(r.data) > 0 {
			return nil, false, fmt.Errorf("%w: reset record of format version %d with a value or a tombstone", ErrCorruptRecord, r.formatVersion)
		}
		return nil, true, nil
	case r.tombstone:
		if len(r.identity) > 0 || len(r.data) > 0 {
			return nil, false, fmt.Errorf("%w: tombstone with a value", ErrCorruptRecord)
		}
		return nil, false, nil
	case len(r.identity) == 0:
		return nil, false, fmt.Errorf("%w: value without identity", ErrCorruptRecord)
	}
	v = &graveler.Value{Identity: r.identity}
	if len(r.data) > 0 {
		v.Data = r.data
	}
	return v, false, nil
}
