//go:build chaos

package chaos

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

var (
	stoppedFor = flag.Duration("stopped.duration", 10*time.Second, "how long TestStoppedMemberCost keeps a member stopped or killed")
	stoppedMax = flag.Duration("stopped.max-window", 5*time.Second, "the longest window of failed or slow calls TestStoppedMemberCost accepts per fault")
)

// slowCall: a call that takes longer counts against availability as a
// failed one does.
const slowCall = time.Second

// timedCall is one client call: when it started, how long it took, how it
// ended.
type timedCall struct {
	op    string
	start time.Time
	dur   time.Duration
	err   error
}

func (c timedCall) bad() bool { return c.err != nil || c.dur > slowCall }

// badWindows merges the intervals of the bad calls that started at or
// after from into windows of unavailability: two bad calls belong to one
// window when they overlap or the gap between them is shorter than a
// client's back-off after a failure (clients retry at once, so a gap that
// short is no evidence that the service answered).
func badWindows(calls []timedCall, from time.Time) (windows [][2]time.Time) {
	const gap = 150 * time.Millisecond
	var bad []timedCall
	for _, c := range calls {
		if c.bad() && !c.start.Before(from) {
			bad = append(bad, c)
		}
	}
	slices.SortFunc(bad, func(a, b timedCall) int { return a.start.Compare(b.start) })
	for _, c := range bad {
		end := c.start.Add(c.dur)
		if n := len(windows); n > 0 && !c.start.After(windows[n-1][1].Add(gap)) {
			if end.After(windows[n-1][1]) {
				windows[n-1][1] = end
			}
			continue
		}
		windows = append(windows, [2]time.Time{c.start, end})
	}
	return windows
}

// TestStoppedMemberCost measures what one stopped etcd member costs the
// service: clients stage writes and read them back through two gravelerd
// replicas while one member of a three-process cluster is frozen with
// SIGSTOP (the leader, then, on a new cluster, a follower) or the leader
// is killed with SIGKILL, for -stopped.duration. It prints the longest
// window during which calls failed or took over a second, and fails when
// that window exceeds -stopped.max-window: two healthy members must keep
// the service available. Run:
//
//	go test -tags chaos ./chaos -run '^TestStoppedMemberCost$' -v
func TestStoppedMemberCost(t *testing.T) {
	for _, fault := range []string{"sigstop-leader", "sigstop-follower", "kill-leader"} {
		t.Run(fault, func(t *testing.T) { measureStoppedMember(t, fault) })
	}
}

func measureStoppedMember(t *testing.T, fault string) {
	c := startCluster(t, 3)
	_, conns := startGravelerds(t, c, zap.NewNop())
	const repo = "avail"
	ensureRepository(t, conns[0], repo)

	var mu sync.Mutex
	var calls []timedCall
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for w := range 4 {
		cl := conns[w%len(conns)]
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		wg.Go(func() {
			record := func(op string, start time.Time, err error) {
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				calls = append(calls, timedCall{op: op, start: start, dur: time.Since(start), err: err})
				mu.Unlock()
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
					}
				}
			}
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Appendf(nil, "w%d/%06d", w, n)
				start := time.Now()
				_, err := call(ctx, func(ctx context.Context) (*pb.PutEntryResponse, error) {
					return cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: client.Branch(repo, "main"), Entry: &pb.Entry{Key: key, Value: value(string(key), 1)}})
				})
				record("put", start, err)
				if err != nil {
					continue
				}
				start = time.Now()
				_, err = call(ctx, func(ctx context.Context) (*pb.GetEntryResponse, error) {
					return cl.GetEntry(ctx, &pb.GetEntryRequest{Repository: client.Repository(repo), Ref: "main", Key: key})
				})
				record("get", start, err)
			}
		})
	}

	// Warm up, then the fault, then time to recover.
	time.Sleep(3 * time.Second)
	m, err := c.waitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if fault == "sigstop-follower" {
		if m = c.follower(func(n int) int { return 0 }); m == nil {
			t.Fatal("no follower")
		}
	}
	faultStart := time.Now()
	switch fault {
	case "kill-leader":
		c.kill(m)
	default:
		if err := c.pause(m); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(*stoppedFor)
	faultEnd := time.Now()
	switch fault {
	case "kill-leader":
		err = c.restart(m)
	default:
		err = c.resume(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	stop()
	wg.Wait()

	var total, failed, slow, before int
	for _, cl := range calls {
		if cl.start.Before(faultStart) {
			if cl.bad() {
				before++
			}
			continue
		}
		total++
		switch {
		case cl.err != nil:
			failed++
		case cl.dur > slowCall:
			slow++
		}
	}
	windows := badWindows(calls, faultStart)
	var worst time.Duration
	for _, w := range windows {
		worst = max(worst, w[1].Sub(w[0]))
	}
	t.Logf("%s of %s from %s to %s", fault, m.name, faultStart.UTC().Format(time.RFC3339Nano), faultEnd.UTC().Format(time.RFC3339Nano))
	fmt.Printf("STOPPED_MEMBER fault=%s member=%s stopped_ms=%d worst_window_ms=%d windows=%d failed=%d slow=%d total=%d bad_before_fault=%d\n",
		fault, m.name, faultEnd.Sub(faultStart).Milliseconds(), worst.Milliseconds(), len(windows), failed, slow, total, before)
	for _, w := range windows {
		if w[1].Sub(w[0]) > slowCall {
			t.Logf("window of %s, from %s to %s after the fault began (it ended at %s); its calls:\n%s", w[1].Sub(w[0]).Round(time.Millisecond),
				w[0].Sub(faultStart).Round(time.Millisecond), w[1].Sub(faultStart).Round(time.Millisecond), faultEnd.Sub(faultStart).Round(time.Millisecond),
				describeCalls(calls, w, faultStart))
		}
	}
	if total == 0 {
		t.Fatal("no calls during the fault: the run measured nothing")
	}
	if worst > *stoppedMax {
		t.Errorf("one %s cost the service %s of failed or slow calls (bound %s)", fault, worst.Round(time.Millisecond), *stoppedMax)
	}
}

// describeCalls lists the bad calls that started within w, at most 20, by
// start, with their outcome.
func describeCalls(calls []timedCall, w [2]time.Time, origin time.Time) string {
	var in []timedCall
	for _, c := range calls {
		if c.bad() && !c.start.Before(w[0]) && !c.start.After(w[1]) {
			in = append(in, c)
		}
	}
	slices.SortFunc(in, func(a, b timedCall) int { return cmp.Compare(a.start.UnixNano(), b.start.UnixNano()) })
	var b strings.Builder
	for i, c := range in {
		if i == 20 {
			fmt.Fprintf(&b, "  ... %d more\n", len(in)-i)
			break
		}
		outcome := "ok (slow)"
		if c.err != nil {
			outcome = fmt.Sprintf("%s: %v", code(c.err), c.err)
			if len(outcome) > 160 {
				outcome = outcome[:160] + "..."
			}
		}
		fmt.Fprintf(&b, "  %s +%s took %s: %s\n", c.op, c.start.Sub(origin).Round(time.Millisecond), c.dur.Round(time.Millisecond), outcome)
	}
	return b.String()
}
