package committed

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"graveler/graveler"
)

// ErrInvalidID: a metarange or range ID that is not a lowercase hex SHA-256,
// so it cannot name a stored object.
var ErrInvalidID = fmt.Errorf("committed: id: %w", graveler.ErrInvalidArgument)

const (
	rangesPrefix     = "_graveler/ranges/"
	metarangesPrefix = "_graveler/metaranges/"
)

// RangeDescriptor describes one range of a metarange.
type RangeDescriptor struct {
	MinKey, MaxKey graveler.Key
	ID             graveler.RangeID
	Count          int
	// EstimatedSize is the total of the range's encoded records, the measure
	// its content-defined boundary was chosen by.
	EstimatedSize int
}

// metaRange is a decoded metarange: ranges in key order, not overlapping.
type metaRange struct {
	ranges []RangeDescriptor
}

// contentID names content by the hex SHA-256 of its bytes.
func contentID(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// validID reports whether s is a lowercase hex SHA-256.
func validID(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func checkMetaRangeID(id graveler.MetaRangeID) error {
	if !validID(string(id)) {
		return fmt.Errorf("%w: metarange %q", ErrInvalidID, id)
	}
	return nil
}

func rangeBlobName(id graveler.RangeID) string                     { return rangesPrefix + string(id) }
func metaRangeBlobName(id graveler.MetaRangeID) string             { return metarangesPrefix + string(id) }
func rangeCacheKey(ns graveler.StorageNamespace, id string) string { return string(ns) + "\x00" + id }

// encodeMetaRange writes ranges as a range file with one record per range:
// key MaxKey, identity the range ID, data uvarint(len MinKey) MinKey
// uvarint(Count) uvarint(EstimatedSize). Keying by MaxKey lets a lookup find
// the one range that can hold a key with a single search.
func encodeMetaRange(ranges []RangeDescriptor, blockSize int) []byte {
	b := newRangeBuilder(blockSize, nil)
	var data []byte
	for _, r := range ranges {
		data = data[:0]
		data = binary.AppendUvarint(data, uint64(len(r.MinKey)))
		data = append(data, r.MinKey...)
		data = binary.AppendUvarint(data, uint64(r.Count))
		data = binary.AppendUvarint(data, uint64(r.EstimatedSize))
		b.add(r.MaxKey, []byte(r.ID), data)
	}
	return b.finish()
}

func decodeMetaRange(data []byte) (*metaRange, error) {
	f, err := parseRange(data)
	if err != nil {
		return nil, err
	}
	mr := &metaRange{ranges: make([]RangeDescriptor, 0, f.count)}
	it := newRangeIter(f)
	var prevMax graveler.Key
	for it.Next() {
		rec := it.Value()
		d := decoder{b: rec.Data}
		r := RangeDescriptor{MaxKey: rec.Key, ID: graveler.RangeID(rec.Identity)}
		r.MinKey = d.bytes()
		r.Count = int(d.uvarint())
		r.EstimatedSize = int(d.uvarint())
		if d.err != nil || len(d.b) != 0 {
			return nil, corruptf("metarange entry %d does not parse", len(mr.ranges))
		}
		if !validID(string(r.ID)) {
			return nil, corruptf("metarange entry %d: bad range id %q", len(mr.ranges), r.ID)
		}
		if len(r.MinKey) == 0 || bytes.Compare(r.MinKey, r.MaxKey) > 0 || (prevMax != nil && bytes.Compare(prevMax, r.MinKey) >= 0) || r.Count <= 0 {
			return nil, corruptf("metarange entry %d: bad bounds", len(mr.ranges))
		}
		prevMax = r.MaxKey
		mr.ranges = append(mr.ranges, r)
	}
	if len(mr.ranges) == 0 {
		return nil, corruptf("empty metarange")
	}
	return mr, nil
}

// find returns the index of the first range whose MaxKey >= key.
func (mr *metaRange) find(key graveler.Key) int {
	lo, hi := 0, len(mr.ranges)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if bytes.Compare(mr.ranges[h].MaxKey, key) < 0 {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}
