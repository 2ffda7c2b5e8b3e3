package kv

import (
	"context"
	"fmt"
)

// CondWriter is an optional ability: writes that apply only while named
// keys are missing, in the same atomic step as their check. Graveler uses
// it to make a staging token read-only from the instant a commit seals it:
// the seal writes a marker key into the token together with the branch
// record (SetIfWith), and every staged write applies only while that
// marker is missing (SetAndReadUnless), so no write can land in a token
// after a commit began reading it.
//
// Both are safe for concurrent use and follow the limits of SetAndRead:
// the keys named by absent count as operations too.
type CondWriter interface {
	// SetAndReadUnless is SetAndRead whose writes apply only if every key
	// of absent is missing when they would. applied reports whether they
	// did; the reads are returned either way, made at that instant (after
	// the writes when they applied). When applied is false nothing of this
	// call applied, and nothing applies after that instant. If an earlier
	// attempt of the call was sent and its answer lost, and a later one
	// finds a key of absent present, the lost attempt may have applied
	// before that key appeared (never after): the call then returns
	// ErrAmbiguous, never applied false, since a caller told "not applied"
	// would write elsewhere what may already stand.
	SetAndReadUnless(ctx context.Context, absent []KeyRef, writes []Write, reads []KeyRef) (got []Entry, applied bool, err error)
	// SetIfWith is SetIf (settled the same way when ambiguous) that also
	// requires every key of absent to be missing and, when it applies,
	// also writes also in the same atomic step. ErrPredicateFailed when
	// pred or an absence does not hold; nothing is written then.
	SetIfWith(ctx context.Context, partition, key, value []byte, pred Predicate, absent []KeyRef, also []Write) error
	// DeleteIfWith is DeleteIf that, when it applies, also writes also in
	// the same atomic step; ErrPredicateFailed when the key is not at
	// pred, and nothing is written then. pred names a version (Absent is
	// ErrInvalidArgument: there is nothing to delete). Settled when
	// ambiguous as DeleteIf is, except that a deletion at pred that did
	// not write also's first key in the same step was not this call's.
	DeleteIfWith(ctx context.Context, partition, key []byte, pred Predicate, also []Write) error
}

// CheckCondWrite checks the shape CondWriter requires beyond each key's
// own limits: writes to distinct keys (the SetIfWith key counts as one),
// and writes, reads and absences within MaxSetAndReadOps.
func CheckCondWrite(absent []KeyRef, writes []Write, reads []KeyRef) error {
	if n := len(absent) + len(writes) + len(reads); n > MaxSetAndReadOps {
		return fmt.Errorf("%w: conditional write of %d operations, limit %d", ErrTooManyOps, n, MaxSetAndReadOps)
	}
	return CheckSetAndRead(writes, nil)
}

var _ CondWriter = (*MemoryStore)(nil)

// SetAndReadUnless checks, writes and reads under one lock.
func (s *MemoryStore) SetAndReadUnless(ctx context.Context, absent []KeyRef, writes []Write, reads []KeyRef) ([]Entry, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if err := CheckCondWrite(absent, writes, reads); err != nil {
		return nil, false, err
	}
	for _, w := range writes {
		if err := s.limits.CheckWrite(w.Partition, w.Key, w.Value); err != nil {
			return nil, false, err
		}
	}
	if err := s.checkReads(append(append([]KeyRef(nil), reads...), absent...)); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	if s.anyPresentLocked(absent) {
		return s.readLocked(reads), false, nil
	}
	for _, w := range writes {
		if err := s.writeLocked(w.Partition, w.Key, w.Value, nil); err != nil {
			return nil, false, err
		}
	}
	NoteWrite(ctx, s.version)
	return s.readLocked(reads), true, nil
}

// SetIfWith checks pred and absent, then writes key and also, under one
// lock.
func (s *MemoryStore) SetIfWith(ctx context.Context, partition, key, value []byte, pred Predicate, absent []KeyRef, also []Write) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	writes := append([]Write{{Partition: partition, Key: key, Value: value}}, also...)
	if err := CheckCondWrite(absent, writes, nil); err != nil {
		return err
	}
	for _, w := range writes {
		if err := s.limits.CheckWrite(w.Partition, w.Key, w.Value); err != nil {
			return err
		}
	}
	if err := s.checkReads(absent); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.anyPresentLocked(absent) {
		return fmt.Errorf("%w: a key that must be missing exists", ErrPredicateFailed)
	}
	if err := s.checkPredLocked(partition, key, pred); err != nil {
		return err
	}
	// The key is written last, so that the revision noted (the store's
	// last) is its own, as on etcd where all share one revision.
	for _, w := range also {
		if err := s.writeLocked(w.Partition, w.Key, w.Value, nil); err != nil {
			return err
		}
	}
	if err := s.writeLocked(partition, key, value, nil); err != nil {
		return err
	}
	NoteWrite(ctx, s.version)
	return nil
}

// DeleteIfWith checks and writes under one lock.
func (s *MemoryStore) DeleteIfWith(ctx context.Context, partition, key []byte, pred Predicate, also []Write) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkDeleteIfWith(partition, key, pred, also); err != nil {
		return err
	}
	for _, w := range also {
		if err := s.limits.CheckWrite(w.Partition, w.Key, w.Value); err != nil {
			return err
		}
	}
	if err := s.limits.CheckKey(partition, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.checkPredLocked(partition, key, pred); err != nil {
		return err
	}
	for _, w := range also {
		if err := s.writeLocked(w.Partition, w.Key, w.Value, nil); err != nil {
			return err
		}
	}
	// pred named a version: the key is there.
	t := s.partitions[string(partition)]
	t.Delete(memItem{key: key})
	s.version++
	if t.Len() == 0 {
		delete(s.partitions, string(partition))
	}
	NoteWrite(ctx, s.version)
	return nil
}

// checkDeleteIfWith checks the shape DeleteIfWith requires: a version to
// delete, and writes to keys distinct from it and from each other, within
// MaxSetAndReadOps with the delete.
func checkDeleteIfWith(partition, key []byte, pred Predicate, also []Write) error {
	if pred.IsAbsent() {
		return fmt.Errorf("kv: conditional delete of %q in partition %q expects it missing: there is nothing to delete", key, partition)
	}
	if len(also) == 0 {
		return nil
	}
	return CheckCondWrite(nil, append([]Write{{Partition: partition, Key: key}}, also...), nil)
}

// checkPredLocked reports ErrPredicateFailed unless key is at pred; s.mu
// is held.
func (s *MemoryStore) checkPredLocked(partition, key []byte, pred Predicate) error {
	var cur int64
	if t := s.partitions[string(partition)]; t != nil {
		if it, ok := t.Get(memItem{key: key}); ok {
			cur = it.version
		}
	}
	if cur != pred.version {
		return fmt.Errorf("%w: %q in partition %q is %v, expected %v", ErrPredicateFailed, key, partition, NewPredicate(cur), pred)
	}
	return nil
}

// anyPresentLocked reports whether one of refs exists; s.mu is held.
func (s *MemoryStore) anyPresentLocked(refs []KeyRef) bool {
	for _, r := range refs {
		if t := s.partitions[string(r.Partition)]; t != nil {
			if _, ok := t.Get(memItem{key: r.Key}); ok {
				return true
			}
		}
	}
	return false
}

// SetAndReadUnless runs s's CondWriter.SetAndReadUnless. A store without
// the ability gets a fallback that reads absent, then runs SetAndRead: the
// check and the writes are then two steps, so a key of absent created in
// between does not stop the writes. Stores that graveler runs on in
// production (etcd) and its tests (memory) have the ability.
func SetAndReadUnless(ctx context.Context, s Store, absent []KeyRef, writes []Write, reads []KeyRef) ([]Entry, bool, error) {
	if cw, ok := s.(CondWriter); ok {
		return cw.SetAndReadUnless(ctx, absent, writes, reads)
	}
	if err := CheckCondWrite(absent, writes, reads); err != nil {
		return nil, false, err
	}
	if len(absent) > 0 {
		got, err := GetMany(ctx, s, absent)
		if err != nil {
			return nil, false, err
		}
		for _, e := range got {
			if !e.Predicate.IsAbsent() {
				if len(reads) == 0 {
					return nil, false, nil
				}
				out, err := GetMany(ctx, s, reads)
				return out, false, err
			}
		}
	}
	out, err := SetAndRead(ctx, s, writes, reads)
	return out, err == nil, err
}

// DeleteIfWith runs s's CondWriter.DeleteIfWith. A store without the
// ability gets a fallback of separate steps, DeleteIf then Set each of
// also, which is not atomic.
func DeleteIfWith(ctx context.Context, s Store, partition, key []byte, pred Predicate, also []Write) error {
	if cw, ok := s.(CondWriter); ok {
		return cw.DeleteIfWith(ctx, partition, key, pred, also)
	}
	if err := checkDeleteIfWith(partition, key, pred, also); err != nil {
		return err
	}
	if err := s.DeleteIf(ctx, partition, key, pred); err != nil {
		return err
	}
	for _, w := range also {
		if err := s.Set(ctx, w.Partition, w.Key, w.Value); err != nil {
			return err
		}
	}
	return nil
}

// SetIfWith runs s's CondWriter.SetIfWith. A store without the ability
// gets a fallback of separate steps: read absent, SetIf, then Set each of
// also, which is not atomic.
func SetIfWith(ctx context.Context, s Store, partition, key, value []byte, pred Predicate, absent []KeyRef, also []Write) error {
	if cw, ok := s.(CondWriter); ok {
		return cw.SetIfWith(ctx, partition, key, value, pred, absent, also)
	}
	if err := CheckCondWrite(absent, append([]Write{{Partition: partition, Key: key, Value: value}}, also...), nil); err != nil {
		return err
	}
	if len(absent) > 0 {
		got, err := GetMany(ctx, s, absent)
		if err != nil {
			return err
		}
		for _, e := range got {
			if !e.Predicate.IsAbsent() {
				return fmt.Errorf("%w: a key that must be missing exists", ErrPredicateFailed)
			}
		}
	}
	if err := s.SetIf(ctx, partition, key, value, pred); err != nil {
		return err
	}
	for _, w := range also {
		if err := s.Set(ctx, w.Partition, w.Key, w.Value); err != nil {
			return err
		}
	}
	return nil
}
