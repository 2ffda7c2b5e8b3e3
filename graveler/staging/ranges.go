package staging

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"graveler/graveler"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
	"graveler/kv"
)

// Range tombstones and reset ranges.
//
// A token keeps all its range tombstones in one record (keys.StagingRanges),
// so that a Get reads them with the entry in the same kv request, and so
// that one compare-and-swap bounds their number. A tombstone is ordered
// against the token's entries by store revision: an entry whose revision
// is below the tombstone's was staged before it and is deleted, one above
// it was staged after it and survives. The record cannot hold the revision
// it is written at, so the tombstone written last carries 0, meaning "the
// record's own revision"; the next DeletePrefix or ResetPrefix, which read
// the record at that revision, fills it in before it appends its own.
//
// A reset range (ResetPrefix) lives in the same record, ordered the same
// way, but it is a discard, not a delete: an entry of the token it hides
// reads as never staged, and it deletes nothing in older tokens or in the
// head, so it is neither a prefix ListRanged returns nor a change. Hiding
// an entry cannot undo a delete range reaching into the prefix, so
// ResetPrefix refuses then (graveler.ErrRangeInScope); a record's reset
// ranges are thus older than any delete range covering the same key.
// Prefixes stay distinct: either call drops the earlier ranges it
// subsumes, and a reset never lands next to a delete of its own prefix.

// Format versions of the ranges record. A record holding a reset range is
// written as rangesFormatReset, which a reader of rangesFormatDelete only
// refuses (ErrUnknownFormat) instead of taking the reset for a delete; a
// record without one stays rangesFormatDelete, readable by either.
const (
	rangesFormatDelete = 1
	rangesFormatReset  = 2
	// RangesFormatVersion is the newest format of the ranges record this
	// build reads (it reads 1..RangesFormatVersion). Entry records have
	// their own, FormatVersion.
	RangesFormatVersion = rangesFormatReset
)

// rangeTombstone is a tombstone or a reset range with its revision
// resolved.
type rangeTombstone struct {
	prefix []byte
	rev    int64
	reset  bool
}

// rangeSet is a token's range tombstones and reset ranges, sorted by
// prefix.
type rangeSet []rangeTombstone

// rangeVerdict is what a token's ranges make of its entry for a key.
type rangeVerdict int

const (
	// entryKept: no range staged after the entry covers the key.
	entryKept rangeVerdict = iota
	// entryDeleted: the key reads as a tombstone.
	entryDeleted
	// entryReset: the key reads as never staged in the token.
	entryReset
)

// judge says what rs make of the token's entry for key staged at rev (0:
// nothing staged). An entry written after every range covering it is
// kept. Otherwise, or when nothing is staged, a delete range covering the
// key deletes it (also in older tokens and the head, so its revision is
// returned as the tombstone's); failing that, an entry hidden by a reset
// range reads as never staged.
func (rs rangeSet) judge(key []byte, rev int64) (rangeVerdict, int64) {
	var del, latest int64
	for _, t := range rs {
		if !bytes.HasPrefix(key, t.prefix) {
			continue
		}
		if !t.reset && t.rev > del {
			del = t.rev
		}
		latest = max(latest, t.rev)
	}
	switch {
	case rev > 0 && latest <= rev:
		return entryKept, 0
	case del > 0:
		return entryDeleted, del
	case rev > 0:
		return entryReset, 0
	}
	return entryKept, 0
}

// prefixes returns the prefixes of the delete ranges: what the token
// deletes in older tokens and in the head.
func (rs rangeSet) prefixes() []graveler.Key {
	var out []graveler.Key
	for _, t := range rs {
		if !t.reset {
			out = append(out, bytes.Clone(t.prefix))
		}
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
	v := m.GetFormatVersion()
	switch {
	case v == 0:
		return nil, fmt.Errorf("staging: range tombstones of token %q: %w: no format version", st, ErrCorruptRecord)
	case v > RangesFormatVersion:
		return nil, fmt.Errorf("staging: range tombstones of token %q: %w: format version %d, this build reads 1..%d", st, ErrUnknownFormat, v, RangesFormatVersion)
	}
	rs := make(rangeSet, 0, len(m.GetTombstones()))
	for _, t := range m.GetTombstones() {
		rev := t.GetRevision()
		if rev == 0 {
			rev = e.Predicate.Version()
		}
		// Version 1 holds delete ranges only; it is read as it always was.
		reset := v >= rangesFormatReset && t.GetResetRange()
		rs = append(rs, rangeTombstone{prefix: t.GetPrefix(), rev: rev, reset: reset})
	}
	return rs, nil
}

// encodeRanges encodes rs with a fresh write id. With hasLatest, the range
// of prefix latest is the one being written: it carries revision 0 (the
// record's own); every other range carries its resolved revision.
func encodeRanges(rs rangeSet, latest []byte, hasLatest bool) []byte {
	wid := make([]byte, 16)
	_, _ = rand.Read(wid) // never fails (crypto/rand aborts the process instead)
	m := &stagingpb.RangeTombstones{FormatVersion: rangesFormatDelete, WriteId: wid}
	for _, t := range rs {
		rev := t.rev
		if hasLatest && bytes.Equal(t.prefix, latest) {
			rev = 0
		}
		if t.reset {
			m.FormatVersion = rangesFormatReset
		}
		m.Tombstones = append(m.Tombstones, &stagingpb.RangeTombstone{Prefix: t.prefix, Revision: rev, ResetRange: t.reset})
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err) // a message of bytes, integers and booleans always marshals
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

// maxRangeRetries bounds the compare-and-swap retries of DeletePrefix
// and ResetPrefix; each means another of them on the same token succeeded
// meanwhile.
const maxRangeRetries = 50

// DeletePrefix stages one range tombstone for prefix: every key under it
// that the token staged before, and every key under it in older tokens and
// in the head, reads as deleted; a key staged after it does not. The empty
// prefix deletes every key. It is one read and one compare-and-swap of the
// token's ranges record (again after a concurrent DeletePrefix or
// ResetPrefix of the same token won). A tombstone subsumes the token's
// earlier tombstones and reset ranges under its prefix; past
// Config.MaxRangeTombstones (both kinds count) it fails with
// graveler.ErrTooManyRangeTombstones; in a retired token it writes nothing
// and fails with graveler.ErrStagingTokenSealed. A caller whose context ends before
// the write is sent gets its error and nothing is written.
func (m *Manager) DeletePrefix(ctx context.Context, st graveler.StagingToken, prefix graveler.Key) error {
	return m.putRange(ctx, st, prefix, false)
}

// ResetPrefix stages one reset range for prefix: every key under it that
// the token staged before (a value or a tombstone) reads as never staged,
// so reads find what older tokens and the head hold; a key staged after
// it survives, and nothing is deleted in older tokens or in the head. The
// empty prefix covers every key. Its cost does not grow with the keys it
// hides (it hides them without touching them): one read and one
// compare-and-swap of the ranges record, retried, limited and guarded by
// the seal marker as DeletePrefix is. It subsumes the token's earlier
// reset ranges under its prefix, and refuses with graveler.ErrRangeInScope,
// writing nothing, while a range tombstone of the token reaches into
// prefix (either prefix starts with the other): hiding the token's entries
// would not undo what that tombstone deletes.
func (m *Manager) ResetPrefix(ctx context.Context, st graveler.StagingToken, prefix graveler.Key) error {
	return m.putRange(ctx, st, prefix, true)
}

// putRange is DeletePrefix (reset false) and ResetPrefix (reset true).
func (m *Manager) putRange(ctx context.Context, st graveler.StagingToken, prefix graveler.Key, reset bool) error {
	op := "delete prefix"
	if reset {
		op = "reset prefix"
	}
	p, err := partition(st)
	if err == nil && len(prefix) > graveler.MaxKeyLen {
		err = fmt.Errorf("%w: prefix is %d bytes, limit %d", graveler.ErrInvalidKey, len(prefix), graveler.MaxKeyLen)
	}
	if err != nil {
		return fmt.Errorf("staging: %s %s in token %q: %w", op, qkey(prefix), st, err)
	}
	ref := rangesRef(p)
	for range maxRangeRetries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("staging: %s %s in token %q: %w", op, qkey(prefix), st, err)
		}
		got, err := kv.GetMany(ctx, m.store, []kv.KeyRef{ref, sealedRef(p)})
		if err != nil {
			return storeErr(err, "%s %s in token %q", op, qkey(prefix), st)
		}
		if !got[1].Predicate.IsAbsent() {
			return sealedErr(p)
		}
		pred := got[0].Predicate
		rs, err := decodeRanges(st, got[0])
		if err != nil {
			return err
		}
		if reset {
			if i := slices.IndexFunc(rs, func(t rangeTombstone) bool {
				return !t.reset && (bytes.HasPrefix(t.prefix, prefix) || bytes.HasPrefix(prefix, t.prefix))
			}); i >= 0 {
				return fmt.Errorf("staging: %s %s in token %q: range tombstone %s: %w", op, qkey(prefix), st, qkey(rs[i].prefix), graveler.ErrRangeInScope)
			}
		}
		// An earlier range whose prefix starts with this one hides nothing
		// this one does not hide too (it is older); a reset range does not
		// subsume a delete range, which never reaches here (refused above).
		rs = slices.DeleteFunc(rs, func(t rangeTombstone) bool {
			return (!reset || t.reset) && bytes.HasPrefix(t.prefix, prefix)
		})
		if len(rs) >= m.cfg.MaxRangeTombstones {
			return fmt.Errorf("staging: %s %s in token %q: the token holds %d range tombstones, limit %d: %w",
				op, qkey(prefix), st, len(rs), m.cfg.MaxRangeTombstones, graveler.ErrTooManyRangeTombstones)
		}
		rs = append(rs, rangeTombstone{prefix: bytes.Clone(prefix), reset: reset})
		slices.SortFunc(rs, func(a, b rangeTombstone) int { return bytes.Compare(a.prefix, b.prefix) })
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("staging: %s %s in token %q: %w", op, qkey(prefix), st, err)
		}
		// Written only while the token is not retired, like any staged
		// write; a failed guard (the record moved or the token was
		// retired) reads both again.
		err = kv.SetIfWith(ctx, m.store, ref.Partition, ref.Key, encodeRanges(rs, prefix, true), pred, []kv.KeyRef{sealedRef(p)}, nil)
		if errors.Is(err, kv.ErrPredicateFailed) {
			continue
		}
		if err != nil {
			return storeErr(err, "%s %s in token %q", op, qkey(prefix), st)
		}
		return nil
	}
	return fmt.Errorf("staging: %s %s in token %q: %w", op, qkey(prefix), st, graveler.ErrTooManyRetries)
}

// ListRanged is List, and the prefixes of the token's range tombstones
// (not of its reset ranges), read (one kv read) before any entry.
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
