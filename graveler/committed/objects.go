package committed

import (
	"strings"

	"graveler/graveler"
)

// The committed objects of a namespace, for a collector that lists them.
// Nothing else under these prefixes is the Manager's.
const (
	// RangesPrefix holds the ranges: RangesPrefix + id.
	RangesPrefix = rangesPrefix
	// MetaRangesPrefix holds the trees' roots and inner nodes (which share
	// one format): MetaRangesPrefix + id.
	MetaRangesPrefix = metarangesPrefix
	// PacksPrefix holds packs, each of many ranges and inner nodes:
	// PacksPrefix + a random name of 32 hex digits.
	PacksPrefix = packsPrefix
)

// ObjectKind says what a committed object is.
type ObjectKind int

const (
	ObjectRange ObjectKind = iota + 1
	ObjectMetaRange
	ObjectPack
)

func (k ObjectKind) String() string {
	switch k {
	case ObjectRange:
		return "range"
	case ObjectMetaRange:
		return "metarange"
	case ObjectPack:
		return "pack"
	}
	return "unknown"
}

// RangeObjectName is the blob name of range id.
func RangeObjectName(id graveler.RangeID) string { return rangeBlobName(id) }

// MetaRangeObjectName is the blob name of metarange id: a tree's root or
// inner node.
func MetaRangeObjectName(id graveler.MetaRangeID) string { return metaRangeBlobName(id) }

// ParseObjectName tells a range's, a metarange's or a pack's blob name
// from any other (a temporary file a backend left, a marker): ok only for
// exactly RangesPrefix or MetaRangesPrefix followed by a valid ID, or
// PacksPrefix followed by a valid pack name (the id returned).
func ParseObjectName(name string) (kind ObjectKind, id string, ok bool) {
	if s, found := strings.CutPrefix(name, packsPrefix); found && validPackID(s) {
		return ObjectPack, s, true
	}
	if s, found := strings.CutPrefix(name, rangesPrefix); found && validID(s) {
		return ObjectRange, s, true
	}
	if s, found := strings.CutPrefix(name, metarangesPrefix); found && validID(s) {
		return ObjectMetaRange, s, true
	}
	return 0, "", false
}
