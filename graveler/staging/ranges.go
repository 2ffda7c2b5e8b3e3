package staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"graveler/graveler"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
	"graveler/kv"
)

// Range tombstones.
//
// A token keeps all its range tombstones in one record (keys.StagingRanges),
// so that a Get reads them with the entry in the same kv request, and so
// that one compare-and-swap bounds their number. A tombstone is ordered
// against the token's entries by store revision: an entry whose revision
// is below the tombstone's was staged before it and is deleted, one above
// it was staged after it and survives. The record cannot hold the revision
// it is written at, so the tombstone written last carries 0, meaning "the
// record's own revision"; the next DeletePrefix, which read the record at
// that revision, fills it in before it appends its own.

// rangeTombstone is a tombstone with its revision resolved.
type rangeTombstone struct {
	prefix []byte
	rev    int64
}

// rangeSet is a token's range tombstones, sorted by prefix.
type rangeSet []rangeTombstone

// covering returns the highest revision of the tombstones covering key, or
// 0 when none does.
func (rs rangeSet) covering(key []byte) int64 {
	var rev int64
	for _, t := range rs {
		if bytes.HasPrefix(key, t.prefix) && t.rev > rev {
			rev = t.rev
		}
	}
	return rev
}

func (rs rangeSet) prefixes() []graveler.Key {
	if len(rs) == 0 {
		return nil
	}
	out := make([]graveler.Key, len(rs))
	for i, t := range rs {
		out[i] = bytes.Clone(t.prefix)
	}
	return out
}

// decodeRanges reads the ranges record as read (an absent record: none).
func decodeRanges(st graveler.StagingToken, e kv.Entry) (rangeSet, error) {
	if e.Predicate.IsAbsent() {
		return nil, nil
	}
	var m stagingpb.RangeTombstones
	if err := proto.Unmarshal(e.Value, &m); err != nil {
		return nil, fmt.Errorf("staging: range tombstones of token %q: %w: %w", st, ErrCorruptRecord, err)
	}
	switch v := m.GetFormatVersion(); {
	case v == 0:
		return nil, fmt.Errorf("staging: range tombstones of token %q: %w: no format version", st, ErrCorruptRecord)
	case v > FormatVersion:
		return nil, fmt.Errorf("staging: range tombstones of token %q: %w: format version %d, this build reads 1..%d", st, ErrUnknownFormat, v, FormatVersion)
	}
	rs := make(rangeSet, 0, len(m.GetTombstones()))
	for _, t := range m.GetTombstones() {
		rev := t.GetRevision()
		if rev == 0 {
			rev = e.Predicate.Version()
		}
		rs = append(rs, rangeTombstone{prefix: t.GetPrefix(), rev: rev})
	}
	return rs, nil
}

func encodeRanges(rs rangeSet, latest []byte) []byte {
	m := &stagingpb.RangeTombstones{FormatVersion: FormatVersion}
	for _, t := range rs {
		rev := t.rev
		if bytes.Equal(t.prefix, latest) {
			rev = 0
		}
		m.Tombstones = append(m.Tombstones, &stagingpb.RangeTombstone{Prefix: t.prefix, Revision: rev})
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err) // a message of bytes and integers always marshals
	}
	return b
}

// rangesRef names the ranges record of partition p.
func rangesRef(p []byte) kv.KeyRef {
	return kv.KeyRef{Partition: p, Key: keys.StagingRanges()}
}

// readRanges reads a token's range tombstones.
func (m *Manager) readRanges(ctx context.Context, p []byte, st graveler.StagingToken) (rangeSet, error) {
	return readRangesOf(ctx, m.store, p, st)
}

func readRangesOf(ctx context.Context, store kv.Store, p []byte, st graveler.StagingToken) (rangeSet, error) {
	ref := rangesRef(p)
	data, pred, err := store.Get(ctx, ref.Partition, ref.Key)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return nil, storeErr(err, "read range tombstones of token %q", st)
	}
	return decodeRanges(st, kv.Entry{Key: ref.Key, Value: data, Predicate: pred})
}

// maxRangeRetries bounds DeletePrefix's compare-and-swap retries; each
// means another DeletePrefix on the same token succeeded meanwhile.
const maxRangeRetries = 50

// DeletePrefix stages one range tombstone for prefix: every key under it
// that the token staged before, and every key under it in older tokens and
// in the head, reads as deleted; a key staged after it does not. The empty
// prefix deletes every key. It is one read and one compare-and-swap of the
// token's ranges record (again after a concurrent DeletePrefix of the same
// token won). A tombstone subsumes the token's earlier ones under its
// prefix; past Config.MaxRangeTombstones it fails with
// graveler.ErrTooManyRangeTombstones. A caller whose context ends before
// the write is sent gets its error and nothing is written.
func (m *Manager) DeletePrefix(ctx context.Context, st graveler.StagingToken, prefix graveler.Key) error {
	p, err := partition(st)
	if err == nil && len(prefix) > graveler.MaxKeyLen {
		err = fmt.Errorf("%w: prefix is %d bytes, limit %d", graveler.ErrInvalidKey, len(prefix), graveler.MaxKeyLen)
	}
	if err != nil {
		return fmt.Errorf("staging: delete prefix %s in token %q: %w", qkey(prefix), st, err)
	}
	ref := rangesRef(p)
	for range maxRangeRetries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("staging: delete prefix %s in token %q: %w", qkey(prefix), st, err)
		}
		data, pred, err := m.store.Get(ctx, ref.Partition, ref.Key)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return storeErr(err, "delete prefix %s in token %q", qkey(prefix), st)
		}
		rs, err := decodeRanges(st, kv.Entry{Key: ref.Key, Value: data, Predicate: pred})
		if err != nil {
			return err
		}
		// An earlier tombstone whose prefix starts with this one deletes
		// nothing this one does not delete too (it is older).
		rs = slices.DeleteFunc(rs, func(t rangeTombstone) bool { return bytes.HasPrefix(t.prefix, prefix) })
		if len(rs) >= m.cfg.MaxRangeTombstones {
			return fmt.Errorf("staging: delete prefix %s in token %q: the token holds %d range tombstones, limit %d: %w",
				qkey(prefix), st, len(rs), m.cfg.MaxRangeTombstones, graveler.ErrTooManyRangeTombstones)
		}
		rs = append(rs, rangeTombstone{prefix: bytes.Clone(prefix)})
		slices.SortFunc(rs, func(a, b rangeTombstone) int { return bytes.Compare(a.prefix, b.prefix) })
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("staging: delete prefix %s in token %q: %w", qkey(prefix), st, err)
		}
		err = m.store.SetIf(ctx, ref.Partition, ref.Key, encodeRanges(rs, prefix), pred)
		if errors.Is(err, kv.ErrPredicateFailed) {
			continue
		}
		if err != nil {
			return storeErr(err, "delete prefix %s in token %q", qkey(prefix), st)
		}
		return nil
	}
	return fmt.Errorf("staging: delete prefix %s in token %q: %w", qkey(prefix), st, graveler.ErrTooManyRetries)
}

// ListRanged is List, and the prefixes of the token's range tombstones,
// read (one kv read) before any entry.
func (m *Manager) ListRanged(ctx context.Context, st graveler.StagingToken) (graveler.ValueIterator, []graveler.Key, error) {
	p, err := partition(st)
	if err != nil {
		return nil, nil, fmt.Errorf("staging: list token %q: %w", st, err)
	}
	rs, err := m.readRanges(ctx, p, st)
	if err != nil {
		return nil, nil, err
	}
	it := newIterator(ctx, m.store, p, st, m.cfg)
	it.ranges, it.rangesRead = rs, true
	return it, rs.prefixes(), nil
}

// shadowed reports whether an entry read at rev is deleted by one of rs.
func shadowed(rs rangeSet, key []byte, rev int64) bool {
	r := rs.covering(key)
	return r > 0 && rev < r
}
