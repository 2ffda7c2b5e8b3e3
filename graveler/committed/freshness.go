package committed

import (
	"hash/maphash"
	"sync"
	"time"
)

// freshness remembers, per object, a time its modification time is known
// to be no older than (when this Manager wrote, touched or statted it), so
// a tree write need not Stat the children it names again.
//
// A commit into a large tree names every sibling of every leaf it
// rewrites: about 88k children for 1,000 random keys in 10M entries. A
// memory smaller than that forgets each child before the next commit asks
// again, and the Stats were three quarters of such a commit. So this holds
// up to a million objects, compactly: 16 bytes of keyed hash and a time
// each (about 30 MB when full), in two generations, the older dropped
// whole when the newer fills, a hit in the older moving to the newer.
//
// The hash is 128 bits from two random seeds: a collision, which would
// spare a stale object its refresh, is as unlikely as two content IDs
// colliding. Safe for concurrent use.
type freshness struct {
	seeds [2]maphash.Seed
	limit int // entries per generation

	mu        sync.Mutex
	cur, prev map[freshKey]int64
}

type freshKey [2]uint64

func newFreshness(limit int) *freshness {
	return &freshness{
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		limit: limit,
		cur:   map[freshKey]int64{},
	}
}

func (f *freshness) keyBytes(b []byte) freshKey {
	return freshKey{maphash.Bytes(f.seeds[0], b), maphash.Bytes(f.seeds[1], b)}
}

// getBytes returns the time remembered for key (rangeCacheKey of a blob
// name, as bytes).
func (f *freshness) getBytes(key []byte) (time.Time, bool) {
	k := f.keyBytes(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.cur[k]
	if !ok {
		if at, ok = f.prev[k]; ok {
			f.putLocked(k, at)
		}
	}
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, at), true
}

// set remembers at for key.
func (f *freshness) set(key string, at time.Time) {
	k := freshKey{maphash.String(f.seeds[0], key), maphash.String(f.seeds[1], key)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.putLocked(k, at.UnixNano())
}

func (f *freshness) putLocked(k freshKey, at int64) {
	if _, ok := f.cur[k]; !ok && len(f.cur) >= f.limit {
		f.prev, f.cur = f.cur, make(map[freshKey]int64, f.limit/4)
	}
	f.cur[k] = at
}

// len reports how many objects are remembered (some may be counted in
// both generations).
func (f *freshness) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cur) + len(f.prev)
}
