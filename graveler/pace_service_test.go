package graveler_test

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
)

// TestAdaptivePacedCommitUnderWriters: on a real etcd, with the default
// adaptive pacing, a commit that starts while writers write is held to a
// rate (it starts low rather than at full speed), and still commits exactly what
// was staged before it, while every acknowledged concurrent write stays
// visible and lands with the next commit.
func TestAdaptivePacedCommitUnderWriters(t *testing.T) {
	store := etcdkvtest.NewStore(t)
	// A long control interval: the writes seen before the commit are
	// recent however slow the machine, and the commit keeps the rate it
	// starts at (slow start), whatever latencies the load gives.
	f := newFixture(t, store, graveler.Config{CommitPacing: graveler.CommitPacing{Floor: 500, Interval: 10 * time.Second}})
	const staged = 3000
	var batch []*graveler.ValueRecord
	for i := range staged {
		v := val(fmt.Sprint(i))
		batch = append(batch, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("s%05d", i)), Value: &v})
		if len(batch) == 500 {
			if err := f.g.SetBatch(f.ctx, f.repo, "main", batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}

	var stopped atomic.Bool
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			// Every write started is acknowledged: none is left in doubt.
			for i := 0; !stopped.Load(); i++ {
				k := fmt.Sprintf("w%d-%05d", w, i)
				if err := f.g.Set(f.ctx, f.repo, "main", graveler.Key(k), val(k), graveler.SetOptions{}); err != nil {
					t.Errorf("write %s: %v", k, err)
					return
				}
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			}
		})
	}
	defer func() { stopped.Store(true); wg.Wait() }()
	// The pacer must have seen writers before the commit starts.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if _, _, seen := f.g.CommitPaceState(); seen >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pacer saw no staged write in a minute")
		}
	}
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	id := f.commit("main", "paced among writers")
	rate, waits, _ := f.g.CommitPaceState()
	stopped.Store(true)
	wg.Wait()
	// Whether the commit had to wait depends on how fast this machine
	// reads; that it was held to a rate does not.
	if math.IsInf(rate, 1) {
		t.Fatalf("a commit among writers was not paced (rate %v, %d waits)", rate, waits)
	}
	t.Logf("commit paced at %v entries/s, %d waits", rate, waits)

	ref := graveler.Ref(id)
	for i := range staged {
		f.want(string(ref), fmt.Sprintf("s%05d", i), fmt.Sprint(i))
	}
	for _, k := range acked[:before] {
		f.want(string(ref), k, k)
	}
	for _, k := range acked {
		f.want("main", k, k)
	}
	f.commit("main", "the writes during the commit")
	got := f.list("main@", graveler.ListEntriesOptions{Limit: staged + len(acked) + 1})
	if len(got) != staged+len(acked) {
		t.Fatalf("main@ holds %d entries, want %d staged and %d written", len(got), staged, len(acked))
	}
}
