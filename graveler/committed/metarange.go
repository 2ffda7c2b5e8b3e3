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
	// maxLevel bounds the level an inner node may claim: far above what
	// any tree needs (each level multiplies the entries by its fan-out).
	maxLevel = 32
)

// RangeDescriptor describes one child of a tree node: a range (leaf) when
// the node is at level 1, otherwise an inner node one level down.
type RangeDescriptor struct {
	// MinKey and MaxKey are the first and last keys of the subtree.
	MinKey, MaxKey graveler.Key
	// ID names the child: a range ID, or an inner node's (a MetaRangeID).
	ID graveler.RangeID
	// Count is the number of entries in the subtree.
	Count int
	// EstimatedSize is the total of the child's own encoded records (its
	// entries for a leaf, its child entries for an inner node): the measure
	// its content-defined boundary was chosen by.
	EstimatedSize int
	// Loc is where the child is stored; not part of the parent's ID.
	Loc Location
}

// blobName is the blob holding child d of a node at level parent: its
// pack, or its own object.
func (d *RangeDescriptor) blobName(parent int) string {
	if d.Loc.Packed() {
		return packsPrefix + d.Loc.Pack
	}
	return childBlobName(parent-1, d.ID)
}

// treeNode is a decoded inner node (or a one-level tree's metarange, read
// as a node of level 1): children in key order, not overlapping, each at
// level-1 (0 = leaves).
type treeNode struct {
	level    int
	children []RangeDescriptor
	// size is the total of the node's encoded records (EstimatedSize of
	// its entry in its parent); stored is its size in the store.
	size, stored int
	// places is the SHA-256 of its locations trailer (zero without one):
	// two stored copies of a node hold the same bytes but this.
	places [sha256.Size]byte
}

// emptyNode is the empty tree's root.
var emptyNode = &treeNode{level: 1}

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

// childBlobName names the object of a child at level (0: a range).
func childBlobName(level int, id graveler.RangeID) string {
	if level == 0 {
		return rangeBlobName(id)
	}
	return metaRangeBlobName(graveler.MetaRangeID(id))
}

// nodeEntryData is the data of a node record: uvarint(len MinKey) MinKey
// uvarint(Count) uvarint(EstimatedSize).
func nodeEntryData(dst []byte, r *RangeDescriptor) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(r.MinKey)))
	dst = append(dst, r.MinKey...)
	dst = binary.AppendUvarint(dst, uint64(r.Count))
	return binary.AppendUvarint(dst, uint64(r.EstimatedSize))
}

// nodeEntryLen is the encoded length of a version 2 node record for r: key
// MaxKey, identity the raw 32-byte ID.
func nodeEntryLen(r *RangeDescriptor) int {
	data := uvarintLen(uint64(len(r.MinKey))) + len(r.MinKey) + uvarintLen(uint64(r.Count)) + uvarintLen(uint64(r.EstimatedSize))
	return uvarintLen(uint64(len(r.MaxKey))) + len(r.MaxKey) + 1 + sha256.Size + uvarintLen(uint64(data)) + data
}

// encodeNode writes an inner node of level (>= 1), one record per child:
// key MaxKey, identity the child's ID as 32 raw bytes, data nodeEntryData.
// Keying by MaxKey lets a lookup find the one child that can hold a key
// with a single search.
//
// When a child is packed, a locations trailer follows (appendLocations);
// id hashes the node's bytes without it.
func encodeNode(level int, children []RangeDescriptor, blockSize int) (data []byte, id string, size int) {
	// Room for the records, the index (two keys a block) and the footer,
	// so that the buffer seldom grows; it is the node's own.
	est := 0
	for i := range children {
		est += nodeEntryLen(&children[i])
	}
	b := newRangeBuilder(blockSize, make([]byte, 0, est+est/8+256))
	b.level = level
	var d []byte
	var raw [sha256.Size]byte
	packed := false
	for i := range children {
		r := &children[i]
		d = nodeEntryData(d[:0], r)
		hex.Decode(raw[:], []byte(r.ID))
		b.add(r.MaxKey, raw[:], d)
		packed = packed || r.Loc.Packed()
	}
	size = b.size
	data = b.take()
	id = contentID(data)
	if packed {
		data = appendLocations(data, children)
	}
	return data, id, size
}

// encodeMetaRange writes the one-level format (version 1): a range file of
// one record per range with the range ID in hex as identity. Only tests
// write it now, to check that such trees stay readable.
func encodeMetaRange(ranges []RangeDescriptor, blockSize int) []byte {
	b := newRangeBuilder(blockSize, nil)
	var data []byte
	for i := range ranges {
		data = nodeEntryData(data[:0], &ranges[i])
		b.add(ranges[i].MaxKey, []byte(ranges[i].ID), data)
	}
	return b.finish()
}

// decodeNode parses an inner node (version 2) or a one-level metarange
// (version 1, level 1), checking checksums and that children are in key
// order, not overlapping, non-empty and validly named.
func decodeNode(data []byte) (*treeNode, error) {
	f, err := parseRange(data)
	if err != nil {
		return nil, err
	}
	n := &treeNode{level: f.level, children: make([]RangeDescriptor, 0, f.count), stored: len(data)}
	if f.version == leafVersion {
		n.level = 1
	}
	it := newRangeIter(f)
	var prevMax graveler.Key
	for {
		key, identity, data, ok := it.nextRaw()
		if !ok {
			break
		}
		n.size += recordLen(key, identity, data)
		d := decoder{b: data}
		r := RangeDescriptor{MaxKey: key}
		if f.version == leafVersion {
			r.ID = graveler.RangeID(identity)
		} else if len(identity) == sha256.Size {
			r.ID = graveler.RangeID(hex.EncodeToString(identity))
		}
		r.MinKey = d.bytes()
		r.Count = int(d.uvarint())
		r.EstimatedSize = int(d.uvarint())
		if d.err != nil || len(d.b) != 0 {
			return nil, corruptf("node entry %d does not parse", len(n.children))
		}
		if !validID(string(r.ID)) {
			return nil, corruptf("node entry %d: bad child id %q", len(n.children), identity)
		}
		if len(r.MinKey) == 0 || bytes.Compare(r.MinKey, r.MaxKey) > 0 || (prevMax != nil && bytes.Compare(prevMax, r.MinKey) >= 0) || r.Count <= 0 {
			return nil, corruptf("node entry %d: bad bounds", len(n.children))
		}
		prevMax = r.MaxKey
		n.children = append(n.children, r)
	}
	if len(n.children) == 0 {
		return nil, corruptf("empty node")
	}
	return n, nil
}

// find returns the index of the first child whose MaxKey >= key.
func (n *treeNode) find(key graveler.Key) int {
	lo, hi := 0, len(n.children)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if bytes.Compare(n.children[h].MaxKey, key) < 0 {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// count is the number of entries under n.
func (n *treeNode) count() int {
	c := 0
	for i := range n.children {
		c += n.children[i].Count
	}
	return c
}
