package staging

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"graveler/graveler"
	"graveler/internal/ctxtime"
	"graveler/keys"
	"graveler/kv"
)

// Manager implements graveler.StagingManager on a kv.Store.
type Manager struct {
	store  kv.Store
	cfg    Config
	fenced *fencedBatcher
}

var (
	_ graveler.StagingManager = (*Manager)(nil)
	_ graveler.FencedStager   = (*Manager)(nil)
	_ graveler.RangeStager    = (*Manager)(nil)
)

// New returns a Manager over store. It starts no goroutines; the store
// stays owned by the caller, who closes it after the last call.
func New(store kv.Store, cfg Config) *Manager {
	cfg = cfg.withDefaults()
	return &Manager{store: store, cfg: cfg, fenced: newFencedBatcher(store, cfg)}
}

// partition validates a token and returns its partition.
func partition(st graveler.StagingToken) ([]byte, error) {
	if err := keys.ValidateName("staging token", string(st)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidStagingToken, err)
	}
	return keys.StagingPartition(string(st)), nil
}

// Get returns the value staged for key, nil (and no error) for a staged
// tombstone, or an error wrapping graveler.ErrEntryNotFound when nothing
// is staged.
func (m *Manager) Get(ctx context.Context, st graveler.StagingToken, key graveler.Key) (*graveler.Value, error) {
	ref, err := m.EntryRef(st, key)
	if err != nil {
		return nil, err
	}
	got, err := m.ReadAt(ctx, []kv.KeyRef{ref})
	if err != nil {
		return nil, fmt.Errorf("get %s in token %q: %w", qkey(key), st, err)
	}
	v, err := m.ParseEntry(st, key, got[0])
	if errors.Is(err, errNotStaged) {
		return nil, fmt.Errorf("staging: get %s in token %q: %w", qkey(key), st, graveler.ErrEntryNotFound)
	}
	return v, err
}

// checkRecord validates what Set and SetBatch write.
func checkRecord(key graveler.Key, value *graveler.Value) error {
	if err := graveler.ValidateKey(key); err != nil {
		return err
	}
	if value != nil {
		return graveler.ValidateValue(value)
	}
	return nil
}

// Set stages value for key, overwriting whatever was staged; a nil value
// stages a tombstone. It is one kv write, applied only while the token is
// not retired (otherwise graveler.ErrStagingTokenSealed, nothing written).
func (m *Manager) Set(ctx context.Context, st graveler.StagingToken, key graveler.Key, value *graveler.Value) error {
	w, err := stagedWrite(ctx, st, key, value)
	if err != nil {
		return err
	}
	if err := m.setUnsealed(ctx, w); err != nil {
		return storeErr(err, "set %s in token %q", qkey(key), st)
	}
	return nil
}

// setUnsealed writes w unless its token is retired (graveler.ErrStagingTokenSealed).
func (m *Manager) setUnsealed(ctx context.Context, w kv.Write) error {
	_, err := setAndReadUnsealed(ctx, m.store, []kv.Write{w}, nil)
	return err
}

// stagedWrite validates one staged write (Set, SetAndRead) and builds it.
func stagedWrite(ctx context.Context, st graveler.StagingToken, key graveler.Key, value *graveler.Value) (kv.Write, error) {
	p, err := partition(st)
	if err == nil {
		err = checkRecord(key, value)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return kv.Write{}, fmt.Errorf("staging: set %s in token %q: %w", qkey(key), st, err)
	}
	return kv.Write{Partition: p, Key: keys.Entry(key), Value: encode(value)}, nil
}

// SetBatch stages many records (a nil Value stages a tombstone). Every
// record is validated before anything is written, so invalid input writes
// nothing. The writes are independent and run Config.WriteParallelism at a
// time: the batch is not atomic, and after an error some records may be
// staged and others not (staging a record again is harmless); each write
// applies only while the token is not retired, so after
// graveler.ErrStagingTokenSealed the rest is in no token. When a key
// appears more than once, its last record wins. The error names the first
// record that failed.
func (m *Manager) SetBatch(ctx context.Context, st graveler.StagingToken, records []*graveler.ValueRecord) error {
	p, err := partition(st)
	if err != nil {
		return fmt.Errorf("staging: set batch in token %q: %w", st, err)
	}
	for i, r := range records {
		if r == nil {
			return fmt.Errorf("staging: set batch in token %q: record %d is nil: %w", st, i, graveler.ErrInvalidArgument)
		}
		if err := checkRecord(r.Key, r.Value); err != nil {
			return fmt.Errorf("staging: set batch in token %q: record %d (key %s): %w", st, i, qkey(r.Key), err)
		}
	}
	records = lastPerKey(records)
	// applied[i]: record i was written. A refusal by the seal marker is
	// not a failure of the batch as a whole: the records written before
	// it stand (the commit that sealed the token reads them) and only the
	// rest must go elsewhere, which the error names.
	applied := make([]bool, len(records))
	var (
		mu    sync.Mutex
		other error // the first failure that is not a refusal
	)
	err = m.forEach(ctx, len(records), func(i int) error {
		r := records[i]
		if err := m.setUnsealed(ctx, kv.Write{Partition: p, Key: keys.Entry(r.Key), Value: encode(r.Value)}); err != nil {
			err = storeErr(err, "set batch in token %q: key %s", st, qkey(r.Key))
			if !errors.Is(err, graveler.ErrStagingTokenSealed) {
				mu.Lock()
				other = cmp.Or(other, err)
				mu.Unlock()
			}
			return err
		}
		applied[i] = true
		return nil
	})
	// A write that failed otherwise beside a refusal may have applied, so
	// its record cannot be handed on as unwritten: that failure answers.
	if err == nil || other != nil {
		return cmp.Or(other, err)
	}
	if !errors.Is(err, graveler.ErrStagingTokenSealed) {
		return err
	}
	rest := make([]*graveler.ValueRecord, 0, len(records))
	for i, r := range records {
		if !applied[i] {
			rest = append(rest, r)
		}
	}
	return &graveler.PartlyStagedError{Unapplied: rest, Err: err}
}

// Sealed reports whether st carries its seal marker: a branch update
// stopped naming it as a staging token (a commit sealed it, a reset
// replaced it) and no staged write applies to it since. A token dropped
// since has no marker any more.
func (m *Manager) Sealed(ctx context.Context, st graveler.StagingToken) (bool, error) {
	p, err := partition(st)
	if err != nil {
		return false, fmt.Errorf("staging: seal of token %q: %w", st, err)
	}
	got, err := kv.GetMany(ctx, m.store, []kv.KeyRef{sealedRef(p)})
	if err != nil {
		return false, storeErr(err, "seal of token %q", st)
	}
	return !got[0].Predicate.IsAbsent(), nil
}

// lastPerKey drops every record whose key appears again later, keeping the
// order of the rest. Sorted batches without repeats (the common case) cost
// one pass and no allocation.
func lastPerKey(records []*graveler.ValueRecord) []*graveler.ValueRecord {
	increasing := true
	for i := 1; i < len(records) && increasing; i++ {
		increasing = bytes.Compare(records[i-1].Key, records[i].Key) < 0
	}
	if increasing {
		return records
	}
	last := make(map[string]int, len(records))
	for i, r := range records {
		last[string(r.Key)] = i
	}
	if len(last) == len(records) {
		return records
	}
	out := make([]*graveler.ValueRecord, 0, len(last))
	for i, r := range records {
		if last[string(r.Key)] == i {
			out = append(out, r)
		}
	}
	return out
}

// forEach calls f(0..n-1) with at most Config.WriteParallelism calls in
// flight. After the first error, or once ctx is done, it starts no more
// calls, waits for those in flight and returns that error.
func (m *Manager) forEach(ctx context.Context, n int, f func(i int) error) error {
	call := func(i int) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("staging: %w", err)
		}
		return f(i)
	}
	workers := min(m.cfg.WriteParallelism, n)
	if workers <= 1 {
		for i := range n {
			if err := call(i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next     atomic.Int64
		failed   atomic.Bool
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := call(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// DropKey removes whatever is staged for key: afterwards Get reports
// graveler.ErrEntryNotFound (this is not a tombstone). It writes a reset
// record over the entry rather than deleting it: a removed key has no
// revision, so an abandoned attempt of an earlier write of it could still
// land after the reset (etcdkv's guarded writes), while a record written
// at a later revision stops every earlier attempt. Dropping a key with
// nothing staged is not an error; in a retired token it writes nothing and
// fails with graveler.ErrStagingTokenSealed. While a range tombstone of the
// token covers key it writes nothing and fails with
// graveler.ErrRangeInScope: a reset record reads as nothing staged, so the
// tombstone would show through it, deleting the key where a reset should
// show what lies below. The record is written in one step with a check of
// the token's ranges record as read (absent, or unchanged), so a
// DeletePrefix that lands meanwhile makes it read again.
func (m *Manager) DropKey(ctx context.Context, st graveler.StagingToken, key graveler.Key) error {
	p, err := partition(st)
	if err == nil {
		err = graveler.ValidateKey(key)
	}
	if err != nil {
		return fmt.Errorf("staging: drop key %s in token %q: %w", qkey(key), st, err)
	}
	reset := kv.Write{Partition: p, Key: keys.Entry(key), Value: encodeReset()}
	ref := rangesRef(p)
	for attempt := range maxDropRetries {
		if attempt > 0 && !ctxtime.Sleep(ctx, dropBackoff(attempt)) {
			return fmt.Errorf("staging: drop key %s in token %q: %w", qkey(key), st, ctx.Err())
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("staging: drop key %s in token %q: %w", qkey(key), st, err)
		}
		got, err := kv.GetMany(ctx, m.store, []kv.KeyRef{ref, sealedRef(p)})
		if err != nil {
			return storeErr(err, "drop key %s in token %q", qkey(key), st)
		}
		if !got[1].Predicate.IsAbsent() {
			return sealedErr(p)
		}
		if got[0].Predicate.IsAbsent() {
			_, applied, err := kv.SetAndReadUnless(ctx, m.store, []kv.KeyRef{sealedRef(p), ref}, []kv.Write{reset}, nil)
			if err != nil {
				return storeErr(err, "drop key %s in token %q", qkey(key), st)
			}
			if applied {
				return nil
			}
			continue // sealed, or a range record written meanwhile
		}
		rs, err := decodeRanges(st, got[0])
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(rs, func(t rangeTombstone) bool { return !t.reset && bytes.HasPrefix(key, t.prefix) }); i >= 0 {
			return fmt.Errorf("staging: drop key %s in token %q: range tombstone %s: %w", qkey(key), st, qkey(rs[i].prefix), graveler.ErrRangeInScope)
		}
		// The record is written again as read, every revision resolved,
		// so that it moves: a range added since the read fails the guard.
		err = kv.SetIfWith(ctx, m.store, ref.Partition, ref.Key, encodeRanges(rs, nil, false), got[0].Predicate, []kv.KeyRef{sealedRef(p)}, []kv.Write{reset})
		if errors.Is(err, kv.ErrPredicateFailed) {
			continue
		}
		if err != nil {
			return storeErr(err, "drop key %s in token %q", qkey(key), st)
		}
		return nil
	}
	return fmt.Errorf("staging: drop key %s in token %q: %w", qkey(key), st, graveler.ErrTooManyRetries)
}

// maxDropRetries bounds DropKey's compare-and-swaps of a token's ranges
// record; each lost one means another drop, DeletePrefix or ResetPrefix of
// the token won.
const maxDropRetries = 200

// dropBackoff is how long DropKey waits before its retry number attempt
// (1-based): drops of one token's keys compete for its ranges record, so
// they spread out, uniformly below min(20ms, 1ms<<attempt).
func dropBackoff(attempt int) time.Duration {
	ceiling := min(20*time.Millisecond, time.Millisecond<<min(attempt, 10))
	return time.Duration(rand.Int64N(int64(ceiling))) + 1
}

func (m *Manager) dropUnsealed(ctx context.Context, p, key []byte) error {
	return m.setUnsealed(ctx, kv.Write{Partition: p, Key: key, Value: encodeReset()})
}

// DropByPrefix removes everything staged under prefix (an empty prefix:
// every entry of the token), writing a reset record over each entry as
// DropKey does. It reads Config.ScanPageSize keys at a time and writes
// them with bounded parallelism before reading on, so its memory does not
// grow with the number of keys. Not atomic: after an error, part of the
// prefix may be dropped; each write applies only while the token is not
// retired (graveler.ErrStagingTokenSealed after that).
func (m *Manager) DropByPrefix(ctx context.Context, st graveler.StagingToken, prefix graveler.Key) error {
	p, err := partition(st)
	if err == nil && len(prefix) > graveler.MaxKeyLen {
		err = fmt.Errorf("%w: prefix is %d bytes, limit %d", graveler.ErrInvalidKey, len(prefix), graveler.MaxKeyLen)
	}
	if err != nil {
		return fmt.Errorf("staging: drop prefix %s in token %q: %w", qkey(prefix), st, err)
	}
	kvPrefix := keys.Entry(prefix)
	start := kvPrefix
	chunk := m.cfg.ScanPageSize
	batch := make([][]byte, 0, chunk)
	for {
		batch = batch[:0]
		var last []byte
		scanned := 0
		for e, err := range m.store.Scan(ctx, p, kv.ScanOptions{Start: start, Limit: chunk}) {
			if err != nil {
				return storeErr(err, "drop prefix %s in token %q", qkey(prefix), st)
			}
			if !bytes.HasPrefix(e.Key, kvPrefix) {
				break
			}
			scanned++
			last = e.Key
			if _, reset, err := decode(e.Value); err != nil || !reset {
				batch = append(batch, e.Key)
			}
			if scanned == chunk {
				break
			}
		}
		err := m.forEach(ctx, len(batch), func(i int) error {
			if err := m.dropUnsealed(ctx, p, batch[i]); err != nil {
				return storeErr(err, "drop prefix %s in token %q", qkey(prefix), st)
			}
			return nil
		})
		if err != nil || scanned < chunk {
			return err
		}
		start = after(last)
	}
}

// after returns the smallest key greater than k, in a new slice.
func after(k []byte) []byte {
	out := make([]byte, len(k)+1)
	copy(out, k)
	return out
}

// Drop removes a token's whole partition, in bounded chunks when the store
// can (kv.PartitionDropper: etcd deletes in ranges of etcdkv.DropChunk keys).
// Dropping an empty or unknown token is not an error.
func (m *Manager) Drop(ctx context.Context, st graveler.StagingToken) error {
	p, err := partition(st)
	if err != nil {
		return fmt.Errorf("staging: drop token %q: %w", st, err)
	}
	if _, err := kv.DropPartition(ctx, m.store, p); err != nil {
		return storeErr(err, "drop token %q", st)
	}
	return nil
}

// List returns an iterator over the token's entries in key order,
// tombstones included (a ValueRecord with a nil Value; also for an entry
// staged before a range tombstone covering it), without the entries staged
// before a reset range covering them. It reads nothing until the
// first Next or SeekGE; then it reads the token's range tombstones, then
// its entries in pages that start at
// Config.ListFirstPageSize entries and double up to Config.ScanPageSize.
// ctx governs every read of the iterator. The iterator must be closed.
func (m *Manager) List(ctx context.Context, st graveler.StagingToken) (graveler.ValueIterator, error) {
	p, err := partition(st)
	if err != nil {
		return nil, fmt.Errorf("staging: list token %q: %w", st, err)
	}
	return newIterator(ctx, m.store, p, st, m.cfg), nil
}
