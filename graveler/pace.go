package graveler

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"graveler/internal/ctxtime"
)

// Commit pacing.
//
// A commit of many entries otherwise takes all the CPU and store capacity it
// can, and the writers of the branch, which never wait for it, still queue
// behind it for a CPU and for etcd; their tail latency rose 6-30x in our
// benchmarks. A fixed rate (Config.CommitReadRate) fixes that on one
// machine and is a guess on any other, so by default the commit's read of
// its staged entries is paced by what the writers experience: the latency
// of their staged writes, as this process observes it, against the same
// latency with no commit reading.
//
// The controller works like TCP's congestion control: every
// CommitPacing.Interval (longer when writes are sparse, so that it judges
// at least 20 of them) it compares the writes' 90th percentile latency of
// the interval with the baseline (that latency with no commit reading);
// above LatencyFactor times the baseline it halves the rate (from the rate
// actually achieved), at most once every two intervals so that a cut shows
// before the next; otherwise it grows the rate by 3%, a step in proportion
// to the rate so that the sawtooth has the same period on any hardware.
// Writes under way that do not complete within an interval count as slow
// ones. A commit with no writer to protect (no write in the interval) is
// not paced at all, so it runs at full speed; one that starts while
// writers are active starts low (10,000 entries a second) and doubles its rate
// every interval until the writers feel it (slow start); its first 4,096
// entries (a few range reads) are never held back, so a small commit right
// after its own staging does not wait for those writes to be judged over.
// The rate never
// falls below Floor, so a commit always progresses, nor rises above
// CommitReadRate when that is set. When the writers' latency stays high
// even at the floor, it is not the commit's doing: the baseline rises.
//
// One pacer serves all the commits of a Graveler: their reads share the
// rate, since they share the capacity it protects.

// CommitPacing tunes the adaptive pacing of a commit's read of its staged
// entries. Zero values take the defaults noted.
type CommitPacing struct {
	// Off turns adaptive pacing off: a commit then reads at
	// Config.CommitReadRate, or unpaced when that is 0.
	Off bool
	// Floor is the least rate, in entries a second, the controller cuts to
	// (default DefaultCommitPaceFloor; at most Config.CommitReadRate).
	Floor float64
	// LatencyFactor is how many times their baseline the writers' latency
	// may rise before the controller cuts the rate (default
	// DefaultCommitPaceLatencyFactor; at least 1.05).
	LatencyFactor float64
	// Interval is the control interval (default DefaultCommitPaceInterval).
	Interval time.Duration
}

// Defaults of CommitPacing.
const (
	DefaultCommitPaceFloor         = 5000
	DefaultCommitPaceLatencyFactor = 1.5
	DefaultCommitPaceInterval      = 50 * time.Millisecond
)

const (
	// paceMinSamples is the fewest writes in an interval that say anything
	// about their latency; with fewer, nobody is writing to speak of.
	paceMinSamples = 3
	// An interval with writes lasts until it has paceWantSamples of them,
	// or paceLongInterval times the Interval: sparse writes are judged on
	// more than a handful. One with none ends on time: a commit that
	// started low because writes had just been seen (say, the staging of
	// what it commits) gets its full speed back after one interval.
	paceWantSamples  = 20
	paceLongInterval = 4
	// paceMaxSamples bounds one interval's samples (memory and sort time).
	paceMaxSamples = 4096
	// paceCut is the multiplicative decrease.
	paceCut = 0.5
	// paceStep is the increase per interval, as a fraction of the rate: a
	// rate that was cut is back where it was after about 24 intervals
	// (1.2 s at the defaults), whatever the hardware's scale, so the
	// writers feel a peak about once a second, for an interval or two.
	paceStep = 0.03
	// paceStartRate is where a commit that starts among writers starts
	// (at least twice the floor).
	paceStartRate = 10_000
	// paceSlowStart is the factor a rate grows by per interval while the
	// writers do not feel it yet, or nobody writes.
	paceSlowStart = 2
	// paceBaselineDrift is how much the baseline rises per interval in
	// which the writers' latency stays high with the commit at its floor:
	// then the latency is not the commit's doing.
	paceBaselineDrift = 1.03
	// paceChunk bounds the entries read between two calls into the pacer.
	paceChunk = 512
	// paceFree is how many entries a commit reads before the adaptive
	// pacer first holds it back: a few of etcd's range reads, which no
	// writer feels.
	// Without it a client that stages 1,000 entries and then commits them
	// waited about 100 ms for its own writes to be judged over.
	paceFree = 4096
)

// paceClock is the pacer's time: the wall clock, or a fake one in tests.
type paceClock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done, whichever is first, and returns
	// ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	if !ctxtime.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// pacer holds the commits' read rate. Safe for concurrent use: writers
// report their latencies and commits reserve entries at any time.
type pacer struct {
	clock    paceClock
	adaptive bool
	ceiling  float64 // 0: none
	floor    float64
	factor   float64
	interval time.Duration

	// inflight counts the staged writes under way: an interval with few
	// writes done but some under way is one in which they stall, not one
	// with nobody writing.
	inflight atomic.Int64

	mu sync.Mutex
	// The current interval: its start, its writes' latencies, whether a
	// commit read at any moment of it, and the entries read.
	start   time.Time
	samples []time.Duration
	busy    bool
	read    int64
	// readers counts the commits reading now.
	readers int
	// baseline is the writes' p90 latency with no commit reading (0:
	// unknown): a moving average of the intervals with no commit reading,
	// pulled down by lower latencies while one reads (the writers were
	// fine then too), and up when even the floor rate leaves it high.
	baseline  time.Duration
	lastWrite time.Time
	// rate is the entries a second allowed (+Inf: unpaced); slowStart while
	// it doubles every interval; lastCut is when it was last cut.
	rate      float64
	slowStart bool
	lastCut   time.Time
	cuts      int64
	// waits counts the reservations that had to wait; observed the writes
	// seen.
	waits, observed int64
	// due is when the reads reserved so far are paid for.
	due time.Time
}

func newPacer(cfg Config, clock paceClock) *pacer {
	pc := cfg.CommitPacing
	p := &pacer{clock: clock, adaptive: !pc.Off, ceiling: cfg.CommitReadRate,
		floor: pc.Floor, factor: pc.LatencyFactor, interval: pc.Interval, rate: math.Inf(1)}
	if p.floor <= 0 {
		p.floor = DefaultCommitPaceFloor
	}
	if p.factor <= 0 {
		p.factor = DefaultCommitPaceLatencyFactor
	}
	p.factor = max(p.factor, 1.05)
	if p.interval <= 0 {
		p.interval = DefaultCommitPaceInterval
	}
	if p.ceiling > 0 {
		p.floor = min(p.floor, p.ceiling)
		p.rate = p.ceiling
	}
	p.start = clock.Now()
	return p
}

// paces reports whether commits go through the pacer at all.
func (p *pacer) paces() bool { return p.adaptive || p.ceiling > 0 }

// writeStarted and writeDone bracket a staged write: writeDone records
// its latency when it succeeded.
func (p *pacer) writeStarted() time.Time {
	if p.adaptive {
		p.inflight.Add(1)
	}
	return time.Now()
}

func (p *pacer) writeDone(start time.Time, err error) {
	if !p.adaptive {
		return
	}
	p.inflight.Add(-1)
	if err == nil {
		p.observe(time.Since(start))
	}
}

// observe records the latency of one staged write.
func (p *pacer) observe(d time.Duration) {
	if !p.adaptive {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.tick(now)
	p.lastWrite = now
	p.observed++
	if len(p.samples) < paceMaxSamples {
		p.samples = append(p.samples, d)
	}
}

// begin registers a commit that starts reading, end one that stopped.
func (p *pacer) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.tick(now)
	if p.readers == 0 && !p.adaptive {
		p.setRate(p.rate)
		p.due = now
	}
	if p.readers == 0 && p.adaptive {
		switch {
		case p.lastWrite.IsZero() || now.Sub(p.lastWrite) > paceLongInterval*p.interval:
			// Nobody to protect: full speed (or the ceiling).
			p.setRate(math.Inf(1))
			p.slowStart = false
		case math.IsInf(p.rate, 1) || p.rate >= p.ceiling && p.ceiling > 0:
			// Writers, and no rate learned with them: start low.
			p.setRate(max(2*p.floor, paceStartRate))
			p.slowStart = true
		}
		p.due = now
	}
	p.readers++
	p.busy = true
}

func (p *pacer) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readers--
}

// setRate sets the rate within the floor and the ceiling.
func (p *pacer) setRate(r float64) {
	r = max(r, p.floor)
	if p.ceiling > 0 {
		r = min(r, p.ceiling)
	}
	p.rate = r
	if math.IsInf(r, 1) {
		commitReadRate.Set(0)
	} else {
		commitReadRate.Set(r)
	}
}

// tick closes the current interval if it is over, and adjusts the rate
// by what the writers saw in it. Called with p.mu held.
func (p *pacer) tick(now time.Time) {
	el := now.Sub(p.start)
	sparse := len(p.samples) < paceWantSamples && (len(p.samples) > 0 || p.inflight.Load() > 0)
	if el < p.interval || el < paceLongInterval*p.interval && sparse {
		return
	}
	defer func() {
		p.start, p.samples, p.busy, p.read = now, p.samples[:0], p.readers > 0, 0
	}()
	if !p.adaptive {
		return
	}
	var lat time.Duration
	enough := len(p.samples) >= paceMinSamples
	if enough {
		slices.Sort(p.samples)
		lat = p.samples[len(p.samples)*9/10]
	} else if p.busy && p.inflight.Load() > 0 {
		// Writes under way that do not complete: they take at least
		// the interval.
		lat, enough = el, true
	}
	if !p.busy {
		if enough {
			if p.baseline == 0 {
				p.baseline = lat
			} else {
				p.baseline += (lat - p.baseline) / 5
			}
			commitPaceBaseline.Set(p.baseline.Seconds())
		}
		return
	}
	if enough && (p.baseline == 0 || lat < p.baseline) {
		if p.baseline == 0 {
			p.baseline = lat
		} else {
			p.baseline += (lat - p.baseline) / 10
		}
		commitPaceBaseline.Set(p.baseline.Seconds())
	}
	achieved := float64(p.read) / el.Seconds()
	switch {
	case !enough:
		// Nobody writing: nothing to protect.
		p.setRate(math.Inf(1))
		p.slowStart = false
	case float64(lat) > p.factor*float64(p.baseline):
		if now.Sub(p.lastCut) < 2*p.interval {
			// The last cut has not shown in the writers' latency yet.
			return
		}
		if p.rate <= p.floor {
			p.baseline = time.Duration(float64(p.baseline) * paceBaselineDrift)
			commitPaceBaseline.Set(p.baseline.Seconds())
		}
		from := p.rate
		if achieved > 0 && achieved < from {
			from = achieved
		}
		p.setRate(from * paceCut)
		p.lastCut, p.slowStart = now, false
		p.cuts++
		commitPaceCuts.Inc()
	case p.slowStart:
		p.setRate(p.rate * paceSlowStart)
	case !math.IsInf(p.rate, 1):
		p.setRate(p.rate * (1 + paceStep))
	}
}

// reserve accounts for n entries about to be read and returns how long to
// wait before reading them.
func (p *pacer) reserve(n int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.tick(now)
	p.busy = true
	p.read += int64(n)
	if math.IsInf(p.rate, 1) {
		p.due = now
		return 0
	}
	// Time not used (a slow page read) is not saved up beyond one
	// interval, so that a commit never bursts to catch up.
	p.due = later(p.due, now.Add(-p.interval)).Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	d := p.due.Sub(now)
	if d > 0 {
		p.waits++
	}
	return d
}

// chunk is how many entries to read before the next reserve.
func (p *pacer) chunk() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if math.IsInf(p.rate, 1) {
		return paceChunk
	}
	// About a thousand sleeps a second: smooth, without a timer per entry.
	return min(paceChunk, max(1, int(p.rate/1000)))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// iterator paces it; release must be called once the commit stopped
// reading it.
func (p *pacer) iterator(ctx context.Context, it ValueIterator) (_ ValueIterator, release func()) {
	if !p.paces() {
		return it, func() {}
	}
	p.begin()
	// An operator's rate (Config.CommitReadRate) holds from the first
	// entry; the adaptive pacer lets the first paceFree through.
	if p.adaptive && p.ceiling == 0 {
		return &pacedIterator{ValueIterator: it, ctx: ctx, p: p, left: paceFree, free: true}, p.end
	}
	return &pacedIterator{ValueIterator: it, ctx: ctx, p: p, left: p.chunk()}, p.end
}

// pacedIterator reserves every chunk of entries with the pacer before
// reading it, so the staging iterator's page reads are spread out too. It
// never reads once its context is done.
type pacedIterator struct {
	ValueIterator
	ctx  context.Context
	p    *pacer
	n    int // entries read since the last reservation
	left int // entries to read before the next one
	// free: the first paceFree entries are being read, uncharged.
	free bool
	err  error
}

func (it *pacedIterator) Next() bool {
	if it.err != nil {
		return false
	}
	if err := it.ctx.Err(); err != nil {
		it.err = err
		return false
	}
	if it.left == 0 {
		if it.free {
			it.free, it.n = false, 0
		}
		d := it.p.reserve(it.n)
		it.n, it.left = 0, it.p.chunk()
		if d > 0 {
			if err := it.p.clock.Sleep(it.ctx, d); err != nil {
				it.err = err
				return false
			}
		}
	}
	if !it.ValueIterator.Next() {
		return false
	}
	it.n++
	it.left--
	return true
}

func (it *pacedIterator) Err() error {
	if it.err != nil {
		return it.err
	}
	return it.ValueIterator.Err()
}
