package committed

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"graveler/graveler"
)

// The functions below check stored objects for a consistency checker
// (package fsck). They read the blob store directly, never through a
// Manager's caches: a check must see what is stored now, and checking an
// object once must not evict what a serving Manager keeps warm.

// ReadMetaRange reads metarange id from ns, checks that its bytes hash to
// id and decode (checksums, ranges in key order, not overlapping, valid
// range ids), and returns its ranges in key order. The empty tree "" has
// no ranges. Errors: ErrInvalidID for a malformed id; an error wrapping
// both graveler.ErrMetaRangeNotFound and ErrBlobNotFound when it is not
// stored; ErrCorrupt when it is damaged; a blob store failure wrapped.
func ReadMetaRange(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) ([]RangeDescriptor, error) {
	if id == "" {
		return nil, nil
	}
	if err := checkMetaRangeID(id); err != nil {
		return nil, err
	}
	data, err := blobs.Get(ctx, ns, metaRangeBlobName(id))
	if errors.Is(err, ErrBlobNotFound) {
		return nil, fmt.Errorf("%w: %s: %w", graveler.ErrMetaRangeNotFound, id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("committed: read metarange %s: %w", id, err)
	}
	if got := contentID(data); got != string(id) {
		return nil, fmt.Errorf("%w: metarange %s: content hashes to %s", ErrCorrupt, id, got)
	}
	mr, err := decodeMetaRange(data)
	if err != nil {
		return nil, fmt.Errorf("committed: metarange %s: %w", id, err)
	}
	return mr.ranges, nil
}

// RangeExists reports whether range id is stored in ns, without reading
// it. ErrInvalidID for a malformed id.
func RangeExists(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.RangeID) (bool, error) {
	if !validID(string(id)) {
		return false, fmt.Errorf("%w: range %q", ErrInvalidID, id)
	}
	ok, err := blobs.Exists(ctx, ns, rangeBlobName(id))
	if err != nil {
		return false, fmt.Errorf("committed: stat range %s: %w", id, err)
	}
	return ok, nil
}

// RangeSummary is what VerifyRange learned of a range's content: its
// first and last keys, its records and its size in bytes.
type RangeSummary struct {
	MinKey, MaxKey graveler.Key
	Count          int
	Size           int
}

// VerifyRange reads range id from ns and checks it completely: its bytes
// hash to id, every checksum holds, every record decodes, and keys are
// non-empty and strictly increasing. Errors: ErrInvalidID for a malformed
// id; an error wrapping ErrBlobNotFound when it is not stored; ErrCorrupt
// when it is damaged; a blob store failure wrapped.
func VerifyRange(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.RangeID) (RangeSummary, error) {
	if !validID(string(id)) {
		return RangeSummary{}, fmt.Errorf("%w: range %q", ErrInvalidID, id)
	}
	data, err := blobs.Get(ctx, ns, rangeBlobName(id))
	if err != nil {
		return RangeSummary{}, fmt.Errorf("committed: read range %s: %w", id, err)
	}
	if got := contentID(data); got != string(id) {
		return RangeSummary{}, fmt.Errorf("%w: range %s: content hashes to %s", ErrCorrupt, id, got)
	}
	f, err := parseRange(data)
	if err != nil {
		return RangeSummary{}, fmt.Errorf("committed: range %s: %w", id, err)
	}
	if f.count == 0 {
		// The writer never stores an empty range: a metarange entry needs
		// a first and a last key.
		return RangeSummary{}, fmt.Errorf("%w: range %s holds no records", ErrCorrupt, id)
	}
	// Copies: the summary may be kept long after data is released.
	return RangeSummary{
		MinKey: bytes.Clone(f.blocks[0].first),
		MaxKey: bytes.Clone(f.lastKey()),
		Count:  f.count,
		Size:   len(data),
	}, nil
}

// Matches checks a verified range against the metarange entry that names
// it: every key within [d.MinKey, d.MaxKey], with those two keys its first
// and last (the writer records them so), and d.Count records. A range
// reaching outside its entry's bounds would hide keys from lookups, which
// search the metarange by those bounds. The error wraps ErrCorrupt.
func (s RangeSummary) Matches(d RangeDescriptor) error {
	switch {
	case bytes.Compare(s.MinKey, d.MinKey) < 0 || bytes.Compare(s.MaxKey, d.MaxKey) > 0:
		return fmt.Errorf("%w: range %s holds keys [%q, %q] outside its metarange bounds [%q, %q]", ErrCorrupt, d.ID, s.MinKey, s.MaxKey, d.MinKey, d.MaxKey)
	case !bytes.Equal(s.MinKey, d.MinKey) || !bytes.Equal(s.MaxKey, d.MaxKey):
		return fmt.Errorf("%w: range %s holds keys [%q, %q], its metarange entry says [%q, %q]", ErrCorrupt, d.ID, s.MinKey, s.MaxKey, d.MinKey, d.MaxKey)
	case s.Count != d.Count:
		return fmt.Errorf("%w: range %s holds %d records, its metarange entry says %d", ErrCorrupt, d.ID, s.Count, d.Count)
	}
	return nil
}
