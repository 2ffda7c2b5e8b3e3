//go:build chaos

package chaos

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

var (
	linDuration  = flag.Duration("lin.duration", 30*time.Second, "how long each linearizability test runs its clients while faults are injected")
	linOps       = flag.Int("lin.ops", 3000, "operations each linearizability test records at most, paced evenly over -lin.duration")
	linClients   = flag.Int("lin.clients", 6, "concurrent clients of each linearizability test")
	linKeys      = flag.Int("lin.keys", 4, "keys the linearizability tests' clients share")
	linFaultGap  = flag.Duration("lin.fault-interval", 2*time.Second, "pause between the linearizability tests' faults")
	linCheckTime = flag.Duration("lin.check-timeout", 3*time.Minute, "bound on porcupine's check of each key's history (exceeded: the test fails as inconclusive)")
)

// open is the return time of an operation whose outcome is unknown (an
// ambiguous or timed-out write): it may take effect at any time after its
// call, or never, so it is concurrent with everything that follows.
const open = math.MaxInt64

// res is an operation's outcome as the model sees it.
type res uint8

const (
	resOK      res = iota // applied (a write) or answered (a read)
	resFailed             // a definite "no": predicate failed, not found, no changes
	resUnknown            // may or may not have applied
)

func (r res) String() string {
	return [...]string{"ok", "failed", "unknown"}[r]
}

// linOp is one recorded operation: call and return in nanoseconds since
// the history began (ret is open when the outcome is unknown).
type linOp struct {
	client    int
	call, ret int64
	in, out   any
}

// history records the operations of concurrent clients.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []linOp
	// openEnded and dropped count writes with unknown outcome and reads
	// that failed (a failed read says nothing and is left out).
	openEnded, dropped int
}

func newHistory() *history { return &history{start: time.Now()} }

// now is monotonic (time.Since uses the monotonic clock).
func (h *history) now() int64 { return int64(time.Since(h.start)) }

// add records an operation; unknown makes it open-ended.
func (h *history) add(client int, call int64, in, out any, unknown bool) {
	ret := h.now()
	if unknown {
		ret = open
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, linOp{client: client, call: call, ret: ret, in: in, out: out})
	if unknown {
		h.openEnded++
	}
}

func (h *history) drop() {
	h.mu.Lock()
	h.dropped++
	h.mu.Unlock()
}

func (h *history) snapshot() ([]linOp, int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops), h.openEnded, h.dropped
}

// linModel is a sequential specification of one key, with what the
// checker needs to split a history by key and to cut it short.
type linModel struct {
	model porcupine.Model
	// key names the key an operation touches; every partition also holds
	// the operations for which all is true (a commit touches every key).
	key func(in any) (key string, all bool)
	// pending is op as seen by a prefix of the history that ends while it
	// runs: a write becomes open-ended, a read is dropped (false).
	pending func(op linOp) (linOp, bool)
}

func toPorcupine(ops []linOp) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		out[i] = porcupine.Operation{ClientId: o.client, Input: o.in, Call: o.call, Output: o.out, Return: o.ret}
	}
	return out
}

// partition splits ops by key, in call order.
func (m linModel) partition(ops []linOp) map[string][]linOp {
	var all []linOp
	parts := map[string][]linOp{}
	for _, o := range ops {
		k, everywhere := m.key(o.in)
		if everywhere {
			all = append(all, o)
			continue
		}
		parts[k] = append(parts[k], o)
	}
	for k := range parts {
		parts[k] = append(parts[k], all...)
		slices.SortStableFunc(parts[k], func(a, b linOp) int { return cmp.Compare(a.call, b.call) })
	}
	return parts
}

// prefix is the history as it stood at time at: operations that returned
// by then as they are, those still running as pending makes them, later
// ones absent. Linearizability is closed under prefixes, so the first
// illegal prefix pins down when the violation became unavoidable.
func (m linModel) prefix(ops []linOp, at int64) []linOp {
	var out []linOp
	for _, o := range ops {
		switch {
		case o.ret <= at:
			out = append(out, o)
		case o.call <= at:
			if p, ok := m.pending(o); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// checkLinearizable checks every key's history with porcupine. A key whose
// history is not linearizable is reported at once with the point where
// it became illegal and the operations around it, then reduced to the
// operations that take part in the violation, with porcupine's
// visualizations (HTML files, left in the temporary directory). It
// returns a one-word result for the summary line.
func checkLinearizable(t *testing.T, name string, m linModel, ops []linOp) string {
	parts := m.partition(ops)
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	result := "Ok"
	for _, k := range keys {
		p := parts[k]
		began := time.Now()
		r, info := porcupine.CheckOperationsVerbose(m.model, toPorcupine(p), *linCheckTime)
		t.Logf("%s: key %q: %d operations: %s in %s", name, k, len(p), r, time.Since(began).Round(time.Millisecond))
		switch r {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			t.Errorf("%s: key %q: the check did not finish within -lin.check-timeout=%s: inconclusive (record fewer operations with -lin.ops)", name, k, *linCheckTime)
			if result == "Ok" {
				result = "Unknown"
			}
			continue
		}
		result = "Illegal"
		full := visualize(t, m, info, name+"-"+k+"-full")
		at, short := m.shortestIllegalPrefix(p)
		if short == nil {
			t.Errorf("%s: NOT LINEARIZABLE: key %q (visualization of all %d operations: %s); no illegal prefix found within the check timeout", name, k, len(p), full)
			continue
		}
		t.Errorf("%s: NOT LINEARIZABLE: key %q (visualization of all %d operations: %s)\n"+
			"it is illegal from %s on: no order of the operations before then explains the one marked * together with the rest.\n"+
			"the operations that explain the state then, by call time:\n%s",
			name, k, len(p), full, ms(at), listOps(m, window(short, at), at))
		minimal, done := m.minimize(short, time.Minute)
		_, minfo := porcupine.CheckOperationsVerbose(m.model, toPorcupine(minimal), *linCheckTime)
		note := ""
		if !done {
			note = " (the reduction ran out of time; some operations left may not matter)"
		}
		t.Logf("%s: key %q: reduced to %d of its %d operations, still illegal%s (visualization: %s):\n%s",
			name, k, len(minimal), len(short), note, visualize(t, m, minfo, name+"-"+k+"-minimal"), listOps(m, minimal, at))
	}
	return result
}

// window returns the operations of ops that explain the state when the
// operation returning at at ran: the last 15 that returned before it was
// called, every one running while it ran, and every open-ended one
// called by then.
func window(ops []linOp, at int64) []linOp {
	from := at
	for _, o := range ops {
		if o.ret == at {
			from = min(from, o.call)
		}
	}
	var before []int64
	for _, o := range ops {
		if o.ret < from {
			before = append(before, o.ret)
		}
	}
	slices.Sort(before)
	if len(before) > 15 {
		from = before[len(before)-15]
	} else if len(before) > 0 {
		from = before[0]
	}
	var out []linOp
	for _, o := range ops {
		if o.ret >= from && o.call <= at {
			out = append(out, o)
		}
	}
	return out
}

// shortestIllegalPrefix finds, by bisection over the return times of p's
// completed operations, the earliest time at which p's prefix is illegal.
func (m linModel) shortestIllegalPrefix(p []linOp) (int64, []linOp) {
	var times []int64
	for _, o := range p {
		if o.ret != open {
			times = append(times, o.ret)
		}
	}
	slices.Sort(times)
	times = slices.Compact(times)
	illegal := func(i int) bool {
		r := porcupine.CheckOperationsTimeout(m.model, toPorcupine(m.prefix(p, times[i])), *linCheckTime)
		return r == porcupine.Illegal
	}
	lo, hi := 0, len(times)-1
	if hi < 0 || !illegal(hi) {
		return 0, nil
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if illegal(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return times[lo], m.prefix(p, times[lo])
}

// minimize weakens an illegal history, keeping each step that leaves it
// illegal: reads are removed (in halving chunks, then one by one), then
// writes with a known outcome become open-ended, last first. Both steps
// keep a linearizable history linearizable, so what remains is still a
// genuine violation, only smaller. A step whose check does not end
// within a second is not taken; done is false if budget ran out.
func (m linModel) minimize(ops []linOp, budget time.Duration) (out []linOp, done bool) {
	deadline := time.Now().Add(budget)
	cur := slices.Clone(ops)
	illegal := func(cand []linOp) bool {
		to := min(time.Second, time.Until(deadline))
		return to > 0 && porcupine.CheckOperationsTimeout(m.model, toPorcupine(cand), to) == porcupine.Illegal
	}
	isRead := func(o linOp) bool { _, write := m.pending(o); return !write }
	for chunk := len(cur) / 2; chunk >= 1; chunk /= 2 {
		var reads []int
		for i, o := range cur {
			if o.ret != open && isRead(o) {
				reads = append(reads, i)
			}
		}
		// From the last chunk back, so earlier indices stay valid.
		for end := len(reads); end > 0; end -= chunk {
			drop := map[int]bool{}
			for _, i := range reads[max(0, end-chunk):end] {
				drop[i] = true
			}
			var cand []linOp
			for i, o := range cur {
				if !drop[i] {
					cand = append(cand, o)
				}
			}
			if illegal(cand) {
				cur = cand
			}
		}
	}
	for i := len(cur) - 1; i >= 0; i-- {
		if cur[i].ret == open {
			continue
		}
		if w, write := m.pending(cur[i]); write {
			cand := slices.Clone(cur)
			cand[i] = w
			if illegal(cand) {
				cur = cand
			}
		}
	}
	return cur, time.Now().Before(deadline)
}

// listOps lists ops by call time, the completed ones first, then the
// open-ended ones; the operation returning at at is marked.
func listOps(m linModel, ops []linOp, at int64) string {
	var b strings.Builder
	for _, pass := range []bool{false, true} {
		for _, o := range ops {
			if (o.ret == open) != pass {
				continue
			}
			mark, ret := " ", "open"
			if o.ret == at {
				mark = "*"
			}
			if o.ret != open {
				ret = ms(o.ret)
			}
			fmt.Fprintf(&b, " %s client %d [%s .. %s] %s\n", mark, o.client, ms(o.call), ret, m.model.DescribeOperation(o.in, o.out))
		}
	}
	return b.String()
}

func ms(ns int64) string { return fmt.Sprintf("%.3fms", float64(ns)/1e6) }

// visualize writes porcupine's HTML view of info to a file that outlives
// the test and returns its path.
func visualize(t *testing.T, m linModel, info porcupine.LinearizationInfo, name string) string {
	f, err := os.CreateTemp("", "graveler-lin-"+strings.NewReplacer("/", "_", " ", "_").Replace(name)+"-*.html")
	if err != nil {
		t.Logf("visualization: %v", err)
		return "(none)"
	}
	defer f.Close()
	if err := porcupine.Visualize(m.model, info, f); err != nil {
		t.Logf("visualization: %v", err)
	}
	return f.Name()
}

// pacer spreads a budget of operations evenly over a duration, whatever
// the number of clients: each takes the next slot and waits for its time.
type pacer struct {
	start time.Time
	every time.Duration
	max   int64
	n     atomic.Int64
}

func newPacer(ops int, d time.Duration) *pacer {
	return &pacer{start: time.Now(), every: d / time.Duration(max(ops, 1)), max: int64(ops)}
}

// next waits for the next slot; false when the budget or ctx is spent.
func (p *pacer) next(ctx context.Context) bool {
	i := p.n.Add(1) - 1
	if i >= p.max {
		return false
	}
	if d := time.Until(p.start.Add(time.Duration(i) * p.every)); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	return ctx.Err() == nil
}

// linFaults injects faults until ctx ends, one at a time, each held for
// 1-3 s: SIGSTOP the leader, kill -9 a follower, SIGSTOP a follower,
// kill -9 the leader, and, when gs is not empty, restart a gravelerd.
func linFaults(ctx context.Context, t *testing.T, rng *rand.Rand, c *cluster, gs []*gravelerd, f *faults, h *history) {
	kinds := 4
	if len(gs) > 0 {
		kinds = 5
	}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(*linFaultGap):
		}
		down := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		note := fmt.Sprintf("at %s", ms(h.now()))
		switch n % kinds {
		case 0:
			memberFault(t, c, rng, true, false, down, f, note)
		case 1:
			memberFault(t, c, rng, false, true, down, f, note)
		case 2:
			memberFault(t, c, rng, false, false, down, f, note)
		case 3:
			memberFault(t, c, rng, true, true, down, f, note)
		case 4:
			g := gs[rng.IntN(len(gs))]
			t.Logf("fault: restart gravelerd %s %s", g.addr, note)
			if err := g.stop(); err != nil {
				t.Logf("gravelerd %s stopped with %v", g.addr, err)
			}
			time.Sleep(down / 4)
			if err := g.start(); err != nil {
				t.Errorf("gravelerd restart: %v", err)
			}
			f.gravelerds.Add(1)
		}
		if t.Failed() {
			return
		}
	}
}

// linSeed returns -chaos.seed, or a time-based seed when it is 0.
func linSeed() uint64 {
	if *seed != 0 {
		return *seed
	}
	return uint64(time.Now().UnixNano())
}

// linClient is one client of a linearizability run.
type linClient interface {
	// run makes operations on keys, one per slot of p, until ctx ends or
	// p's budget is spent, recording them in the client's history.
	run(ctx context.Context, keys []string, p *pacer)
	// outcomes counts the client's operations by "op outcome".
	outcomes() map[string]int
}

// runLin is the body of a linearizability run called name: -lin.clients
// clients made by newClient (the i-th, recording into h, its generator
// seeded from s) share -lin.keys keys while linFaults injects faults into
// c and gs (rng); then the history is checked against the model made from
// its operations and the run reported. A run with too few completed
// operations or no faults fails: it proved little.
func runLin(t *testing.T, name string, s uint64, rng *rand.Rand, c *cluster, gs []*gravelerd,
	newClient func(i int, h *history, rng *rand.Rand) linClient, model func(ops []linOp) linModel) {
	var keys []string
	for i := range *linKeys {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}

	h := newHistory()
	ctx, stop := context.WithTimeout(context.Background(), *linDuration)
	defer stop()
	p := newPacer(*linOps, *linDuration)
	clients := make([]linClient, *linClients)
	var wg sync.WaitGroup
	for i := range clients {
		cl := newClient(i, h, rand.New(rand.NewPCG(s, uint64(i)+1)))
		clients[i] = cl
		wg.Go(func() { cl.run(ctx, keys, p) })
	}
	var fs faults
	var fwg sync.WaitGroup
	fwg.Go(func() { linFaults(ctx, t, rng, c, gs, &fs, h) })
	wg.Wait()
	stop()
	fwg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	ops, openEnded, dropped := h.snapshot()
	counts := map[string]int{}
	for _, cl := range clients {
		for k, n := range cl.outcomes() {
			counts[k] += n
		}
	}
	t.Logf("%s: operations by outcome: %v", name, counts)
	began := time.Now()
	result := checkLinearizable(t, name, model(ops), ops)
	fmt.Printf("%s seed=%d duration=%s operations=%d open-ended=%d dropped-reads=%d keys=%d clients=%d faults=%d (%s) result=%s check=%s\n",
		strings.ToUpper(name), s, *linDuration, len(ops), openEnded, dropped, len(keys), len(clients), fs.total(), &fs, result, time.Since(began).Round(time.Millisecond))
	if len(ops)-openEnded < len(ops)/2 || fs.total() == 0 {
		t.Errorf("too few completed operations (%d of %d) or no faults (%d): the run proved little", len(ops)-openEnded, len(ops), fs.total())
	}
	// A read that failed is left out of the history: if most did, what
	// is checked is mostly writes, and a system that fails its reads
	// would pass.
	reads := 0
	for _, op := range ops {
		if r, ok := op.in.(interface{ read() bool }); ok && r.read() {
			reads++
		}
	}
	if reads == 0 || dropped > reads {
		t.Errorf("%d reads checked and %d dropped (failed): the run proved little about reads", reads, dropped)
	}
}
