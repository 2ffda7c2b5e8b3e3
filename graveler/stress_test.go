package graveler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// stressDuration is how long the concurrency tests run: GRAVELER_STRESS_DURATION
// if set (e.g. "2m" for a soak), 2s with -short, else def.
func stressDuration(t *testing.T, def time.Duration) time.Duration {
	if s := os.Getenv("GRAVELER_STRESS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("GRAVELER_STRESS_DURATION: %v", err)
		}
		return d
	}
	if testing.Short() {
		return 2 * time.Second
	}
	return def
}

type stressResult struct {
	acked, retried, commits, noChanges, commitErrors, reads, injected int64
}

// runStress runs seed 004's scenario on one branch: writers stage unique
// keys (each key rewritten over and over), committers commit in a loop,
// readers read. A write that fails is retried until it is acknowledged,
// so each key's last acknowledged value is its last value, except a key
// whose final write was cut by the end of the run, which may hold either.
// Afterwards, with faults off, one more commit takes whatever is staged,
// and the checker demands that every acknowledged write is there with its
// last value, and that every commit reported successful is in the
// branch's first-parent history.
func runStress(t *testing.T, store kv.Store, faults *kvtest.FaultStore, cfg graveler.Config, dur time.Duration) stressResult {
	const writers, committers, readers, keysPerWriter = 16, 4, 2, 64
	repo := graveler.RepositoryID("repo")
	if cfg.SeparateFenceRead {
		repo = "repo-separate-read"
	}
	f := newFixtureRepo(t, store, cfg, repo)
	if f.g.FencedWrites() == cfg.SeparateFenceRead {
		t.Fatalf("fenced writes %v with SeparateFenceRead %v", f.g.FencedWrites(), cfg.SeparateFenceRead)
	}
	if faults != nil {
		faults.FailRandomly(uint64(time.Now().UnixNano()), 0.01,
			kvtest.FaultError, kvtest.FaultAmbiguousApplied, kvtest.FaultAmbiguousNotApplied)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()

	type keyState struct{ last, pending string }
	states := make([]map[string]*keyState, writers)
	var res stressResult
	var okCommits sync.Map
	var wg sync.WaitGroup
	for w := range writers {
		states[w] = map[string]*keyState{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for seq := 0; ctx.Err() == nil; seq++ {
				key := fmt.Sprintf("w%02d/k%03d", w, rng.IntN(keysPerWriter))
				v := fmt.Sprintf("%s#%d", key, seq)
				st := states[w][key]
				if st == nil {
					st = &keyState{}
					states[w][key] = st
				}
				st.pending = v
				for {
					err := f.g.Set(context.Background(), f.repo, "main", graveler.Key(key), val(v), graveler.SetOptions{})
					if err == nil {
						st.last, st.pending = v, ""
						atomic.AddInt64(&res.acked, 1)
						break
					}
					if faults == nil {
						t.Errorf("write %s: %v", key, err)
						return
					}
					atomic.AddInt64(&res.retried, 1)
					if ctx.Err() != nil {
						break // st.pending may or may not have landed
					}
				}
			}
		})
	}
	for range committers {
		wg.Go(func() {
			for ctx.Err() == nil {
				id, err := f.g.Commit(context.Background(), f.repo, "main", graveler.CommitParams{Committer: "stress", Message: "loop"})
				switch {
				case err == nil:
					okCommits.Store(id, true)
					atomic.AddInt64(&res.commits, 1)
				case errors.Is(err, graveler.ErrNoChanges):
					atomic.AddInt64(&res.noChanges, 1)
				default:
					atomic.AddInt64(&res.commitErrors, 1)
					if faults == nil {
						t.Errorf("commit: %v", err)
						return
					}
				}
			}
		})
	}
	for r := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for ctx.Err() == nil {
				key := fmt.Sprintf("w%02d/k%03d", rng.IntN(writers), rng.IntN(keysPerWriter))
				_, err := f.g.Get(context.Background(), f.repo, "main", graveler.Key(key))
				if err != nil && !errors.Is(err, graveler.ErrEntryNotFound) && faults == nil {
					t.Errorf("read %s: %v", key, err)
					return
				}
				atomic.AddInt64(&res.reads, 1)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return res
	}
	if faults != nil {
		res.injected = faults.Injected()
		faults.Reset()
	}

	// Everything staged goes into one last commit.
	head, err := f.g.Commit(context.Background(), f.repo, "main", graveler.CommitParams{Message: "final", AllowEmpty: true})
	if err != nil {
		t.Fatalf("final commit: %v", err)
	}
	br, err := f.g.GetBranch(context.Background(), f.repo, "main")
	if err != nil || br.CommitID != head || len(br.SealedTokens) != 0 {
		t.Fatalf("branch after the final commit: %+v %v (head %s)", br, err, head)
	}
	checked := 0
	for w := range writers {
		for key, st := range states[w] {
			got, err := f.get(string(head), key)
			ok := err == nil && (got == st.last || st.pending != "" && got == st.pending)
			if st.last == "" && st.pending != "" && errors.Is(err, graveler.ErrEntryNotFound) {
				ok = true // never acknowledged, and it did not land
			}
			if !ok {
				t.Errorf("key %s: committed %q (%v), last acknowledged %q, unacknowledged %q", key, got, err, st.last, st.pending)
			}
			checked++
		}
	}
	inLog := map[graveler.CommitID]bool{}
	for c, err := range f.g.Log(context.Background(), f.repo, graveler.Ref(head), graveler.LogOptions{FirstParent: true}) {
		if err != nil {
			t.Fatal(err)
		}
		inLog[c.CommitID] = true
	}
	lost := 0
	okCommits.Range(func(k, _ any) bool {
		if !inLog[k.(graveler.CommitID)] {
			lost++
			t.Errorf("commit %s was reported successful but is not in main's first-parent history", k)
		}
		return true
	})
	t.Logf("%d writes acknowledged (%d retried after a failure), %d commits (+%d no changes, %d failed), %d reads, %d faults injected; %d keys verified, %d commits in history, %d lost",
		res.acked, res.retried, res.commits, res.noChanges, res.commitErrors, res.reads, res.injected, checked, len(inLog), lost)
	if res.acked == 0 || res.commits == 0 {
		t.Fatalf("the run did no work: %+v", res)
	}
	return res
}

// fenceModes are the two writer fences: read in the same kv round trip as
// the write (the default wherever the store can), or as a separate,
// amortized branch read.
var fenceModes = []struct {
	name string
	cfg  graveler.Config
}{
	{"fenced-write", graveler.Config{}},
	{"separate-read", graveler.Config{SeparateFenceRead: true}},
}

func TestConcurrentWritersAndCommitters(t *testing.T) {
	dur := stressDuration(t, 20*time.Second)
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, m := range fenceModes {
			t.Run(m.name, func(t *testing.T) {
				t.Parallel()
				runStress(t, store, nil, m.cfg, dur)
			})
		}
	})
}

func TestConcurrentWritersAndCommittersWithFaults(t *testing.T) {
	dur := stressDuration(t, 10*time.Second)
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, m := range fenceModes {
			t.Run(m.name, func(t *testing.T) {
				t.Parallel()
				fs := kvtest.NewFaultStore(store)
				if res := runStress(t, fs, fs, m.cfg, dur); res.injected == 0 {
					t.Fatal("no fault was injected")
				}
			})
		}
	})
}
