package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// workload is the shape of every generated key and value.
type workload struct {
	KeySize   int
	ValueSize int
}

// key returns a key unique to (worker, seq), padded to KeySize so both the
// graveler and the raw-etcd runs move the same bytes.
func (w workload) key(prefix string, worker, seq int) []byte {
	k := fmt.Appendf(nil, "%s%04d/%012d", prefix, worker, seq)
	for len(k) < w.KeySize {
		k = append(k, 'x')
	}
	return k
}

// identity is a 16-byte content identity; unique per write so every write
// is a change.
func identity(worker, seq int) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(worker))
	binary.BigEndian.PutUint64(b[8:], uint64(seq))
	return b
}

func (w workload) data() []byte {
	b := make([]byte, w.ValueSize)
	_, _ = rand.Read(b)
	return b
}

// runWorkers runs op on n workers until d passes or ctx ends, and returns
// each worker's samples and the wall time. op records its own samples, so
// one worker may time several operations.
func runWorkers(ctx context.Context, n int, d time.Duration, op func(ctx context.Context, rec *recorder, worker, seq int) error) ([]*recorder, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	recs := make([]*recorder, n)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range n {
		recs[w] = newRecorder()
		wg.Go(func() {
			for seq := 0; !over(ctx); seq++ {
				if err := op(ctx, recs[w], w, seq); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return recs, time.Since(start)
}

// timed runs f and records it under op unless the run's deadline cut it
// short (a call interrupted by the end of the run is not a sample).
func timed(ctx context.Context, rec *recorder, op string, f func() error) error {
	start := time.Now()
	err := f()
	if err != nil && over(ctx) {
		return context.DeadlineExceeded
	}
	rec.observe(op, time.Since(start), err)
	return nil
}

// over reports whether the run has ended. It checks the deadline itself:
// gRPC fails a call whose deadline has passed before the context's own
// timer has marked it done, and such failures are not samples.
func over(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
