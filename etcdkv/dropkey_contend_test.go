package etcdkv_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/staging"
)

// TestDropKeyConcurrentOnOneToken: drops of distinct keys of one token
// whose ranges record exists all compete for that record; each retries
// with backoff, and all succeed.
func TestDropKeyConcurrentOnOneToken(t *testing.T) {
	ctx := t.Context()
	s := etcdkvtest.NewStore(t)
	m := staging.New(s, staging.Config{})
	st := graveler.StagingToken("tok1")
	if err := m.DeletePrefix(ctx, st, graveler.Key("z/")); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	var last atomic.Value
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.DropKey(ctx, st, graveler.Key(fmt.Sprintf("k%d", i))); err != nil {
				failed.Add(1)
				last.Store(err)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		err := last.Load().(error)
		t.Fatalf("%d of 100 concurrent DropKeys of distinct keys failed, e.g. %v (too many retries: %v)", n, err, errors.Is(err, graveler.ErrTooManyRetries))
	}
}
