package graveler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

// fakeClock is a paceClock whose time moves only when told to or when a
// paced read sleeps.
type fakeClock struct {
	now     time.Time
	onSleep func(d time.Duration)
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(d)
	if c.onSleep != nil {
		c.onSleep(d)
	}
	return ctx.Err()
}

func newTestPacer(cfg Config) (*pacer, *fakeClock) {
	c := &fakeClock{now: time.Unix(1_000_000, 0)}
	return newPacer(cfg, c), c
}

// paceSim drives a pacer in steps of a millisecond: one staged write a
// step whose latency the test's model gives, and one commit reading at
// most capacity entries a second, as the paced iterator does: read a
// chunk, reserve it, sleep what the pacer says.
type paceSim struct {
	t        *testing.T
	p        *pacer
	c        *fakeClock
	capacity float64
	latency  func(load float64) time.Duration
	writing  bool
	reading  bool
	next     time.Time // when the commit's current chunk is read
	chunk    int
	read     int64
	// what the steps saw
	minRate, maxRate float64
	lats             []time.Duration
}

func newPaceSim(t *testing.T, cfg Config) *paceSim {
	p, c := newTestPacer(cfg)
	return &paceSim{t: t, p: p, c: c, capacity: 300_000, writing: true,
		latency: func(float64) time.Duration { return time.Millisecond }, minRate: math.Inf(1)}
}

// load is the commit's read rate at this step, which the writers feel.
func (s *paceSim) load() float64 {
	if !s.reading {
		return 0
	}
	return min(s.p.rate, s.capacity)
}

func (s *paceSim) startCommit() {
	s.p.begin()
	s.reading, s.next, s.chunk = true, s.c.now, s.p.chunk()
}

func (s *paceSim) stopCommit() {
	s.p.end()
	s.reading = false
}

func (s *paceSim) run(d time.Duration) {
	for end := s.c.now.Add(d); s.c.now.Before(end); s.c.now = s.c.now.Add(time.Millisecond) {
		if s.writing {
			l := s.latency(s.load())
			s.lats = append(s.lats, l)
			s.p.observe(l)
		}
		for s.reading && !s.next.After(s.c.now) {
			// The chunk just read is reserved; the next is read after
			// the pacer's wait, at the commit's capacity.
			wait := s.p.reserve(s.chunk)
			s.read += int64(s.chunk)
			s.chunk = s.p.chunk()
			s.next = s.next.Add(max(wait, 0) + time.Duration(float64(s.chunk)/s.capacity*float64(time.Second)))
			s.next = later(s.next, s.c.now.Add(time.Nanosecond))
		}
		if s.reading {
			s.minRate, s.maxRate = min(s.minRate, s.p.rate), max(s.maxRate, s.p.rate)
			if s.p.rate < s.p.floor {
				s.t.Fatalf("rate %v below the floor %v", s.p.rate, s.p.floor)
			}
			if s.p.ceiling > 0 && s.p.rate > s.p.ceiling {
				s.t.Fatalf("rate %v above the ceiling %v", s.p.rate, s.p.ceiling)
			}
		}
	}
}

// resetRange forgets the rates seen so far.
func (s *paceSim) resetRange() { s.minRate, s.maxRate, s.lats = math.Inf(1), 0, nil }

// TestPaceNobodyWriting: with no staged write to protect a commit is not
// paced at all, whatever rate the pacer held before.
func TestPaceNobodyWriting(t *testing.T) {
	s := newPaceSim(t, Config{})
	s.writing = false
	s.startCommit()
	s.run(2 * time.Second)
	if !math.IsInf(s.maxRate, 1) || !math.IsInf(s.minRate, 1) || s.p.waits != 0 {
		t.Fatalf("commit paced with nobody writing: rates %v..%v, %d waits", s.minRate, s.maxRate, s.p.waits)
	}
	if want := int64(2 * s.capacity * 0.99); s.read < want {
		t.Fatalf("read %d entries in 2s at a capacity of %v/s", s.read, s.capacity)
	}
}

// TestPaceCutsAndRecovers: latency far above the baseline cuts the rate,
// at most to the floor; back at the baseline it grows again; writers
// that leave give the commit its full speed back.
func TestPaceCutsAndRecovers(t *testing.T) {
	s := newPaceSim(t, Config{})
	s.run(time.Second) // the baseline: 1ms, no commit
	if s.p.baseline != time.Millisecond {
		t.Fatalf("baseline %v, want 1ms from the idle writes", s.p.baseline)
	}
	s.latency = func(float64) time.Duration { return 5 * time.Millisecond }
	s.startCommit()
	prev := s.p.rate
	if math.IsInf(prev, 1) {
		t.Fatal("a commit starting among writers is not paced")
	}
	for range 40 {
		s.run(DefaultCommitPaceInterval)
		if s.p.rate > prev {
			t.Fatalf("rate rose from %v to %v with the writers' latency at 5x", prev, s.p.rate)
		}
		prev = s.p.rate
	}
	if s.p.rate != s.p.floor || s.p.cuts == 0 {
		t.Fatalf("rate %v after 2s at 5x the baseline (%d cuts), want the floor %v", s.p.rate, s.p.cuts, s.p.floor)
	}
	readAtFloor := s.read
	s.run(time.Second)
	if s.read-readAtFloor < int64(s.p.floor*0.9) {
		t.Fatalf("read %d entries in 1s at the floor of %v/s", s.read-readAtFloor, s.p.floor)
	}

	s.latency = func(float64) time.Duration { return time.Millisecond }
	s.run(2 * time.Second)
	if s.p.rate <= 2*s.p.floor {
		t.Fatalf("rate %v after 2s back at the baseline: no recovery from the floor %v", s.p.rate, s.p.floor)
	}
	s.writing = false
	s.run(2 * time.Second)
	if !math.IsInf(s.p.rate, 1) {
		t.Fatalf("rate %v 2s after the writers left, want unpaced", s.p.rate)
	}
}

// TestPaceHoldsWritersNearBaseline: with the writers' latency rising with
// the commit's rate (2x the baseline at 40,000 entries/s), the controller
// keeps them near the baseline while the commit still gets a good share.
func TestPaceHoldsWritersNearBaseline(t *testing.T) {
	const knee = 40_000
	s := newPaceSim(t, Config{})
	s.latency = func(load float64) time.Duration {
		return time.Duration(float64(time.Millisecond) * (1 + (load/knee)*(load/knee)))
	}
	s.run(time.Second)
	s.startCommit()
	s.run(time.Second)
	s.resetRange()
	start := s.read
	s.run(10 * time.Second)
	var sum time.Duration
	over := 0
	for _, l := range s.lats {
		sum += l
		if l > 2*time.Millisecond {
			over++
		}
	}
	mean := sum / time.Duration(len(s.lats))
	rate := float64(s.read-start) / 10
	t.Logf("rate %.0f..%.0f, %.0f entries/s on average; writes: mean %v, %d of %d over 2x", s.minRate, s.maxRate, rate, mean, over, len(s.lats))
	if mean > 1500*time.Microsecond || over > len(s.lats)/100 {
		t.Fatalf("writers at %v on average, %d of %d writes over 2x the baseline", mean, over, len(s.lats))
	}
	if rate < knee/4 {
		t.Fatalf("commit held to %.0f entries/s where %d would cost the writers 2x", rate, knee)
	}
}

// TestPaceCeiling: CommitReadRate bounds the adaptive rate, nobody writing
// or not, and with adaptive pacing off it is a fixed rate.
func TestPaceCeiling(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			s := newPaceSim(t, Config{CommitReadRate: 5000, CommitPacing: CommitPacing{Off: off}})
			s.writing = false
			s.startCommit()
			s.run(2 * time.Second)
			if s.read < 9500 || s.read > 10500 {
				t.Fatalf("read %d entries in 2s at a ceiling of 5000/s", s.read)
			}
			s.writing = true
			s.run(5 * time.Second)
			if s.maxRate > 5000 {
				t.Fatalf("rate reached %v over the ceiling", s.maxRate)
			}
		})
	}
}

// TestPaceFloorBaselineDrift: latency high whatever the commit does is not
// the commit's doing; held at the floor, the baseline rises to it and the
// commit speeds up again.
func TestPaceFloorBaselineDrift(t *testing.T) {
	s := newPaceSim(t, Config{})
	s.run(time.Second)
	s.latency = func(float64) time.Duration { return 4 * time.Millisecond }
	s.startCommit()
	s.run(2 * time.Second)
	s.resetRange()
	s.run(10 * time.Second)
	if s.p.baseline < 2*time.Millisecond || s.maxRate <= 2*s.p.floor {
		t.Fatalf("baseline %v, rates %v..%v after 10s of 4ms writes", s.p.baseline, s.minRate, s.maxRate)
	}
}

// sliceIterator yields n records and counts the calls to Next.
type sliceIterator struct {
	n, i, calls int
}

func (it *sliceIterator) Next() bool {
	it.calls++
	if it.i >= it.n {
		return false
	}
	it.i++
	return true
}
func (it *sliceIterator) Value() *ValueRecord {
	return &ValueRecord{Key: Key(fmt.Sprint(it.i)), Value: &Value{}}
}
func (it *sliceIterator) SeekGE(Key) {}
func (it *sliceIterator) Err() error { return nil }
func (it *sliceIterator) Close()     {}

// TestPacedIteratorStopsOnCancel: once its caller gave up, the paced
// iterator reads nothing more, whether the cancel comes while it sleeps
// or between two reads.
func TestPacedIteratorStopsOnCancel(t *testing.T) {
	p, c := newTestPacer(Config{CommitReadRate: 1000, CommitPacing: CommitPacing{Off: true}})
	ctx, cancel := context.WithCancel(context.Background())
	src := &sliceIterator{n: 10_000}
	c.onSleep = func(time.Duration) { cancel() }
	it, release := p.iterator(ctx, src)
	defer release()
	n := 0
	for it.Next() {
		n++
	}
	if !errors.Is(it.Err(), context.Canceled) {
		t.Fatalf("err %v after a cancel while paced", it.Err())
	}
	if src.calls != n || n != 1 {
		t.Fatalf("%d entries yielded, %d reads: want 1 and no read after the cancel", n, src.calls)
	}
	if it.Next() || src.calls != n {
		t.Fatal("read after the caller gave up")
	}

	p2, _ := newTestPacer(Config{})
	ctx2, cancel2 := context.WithCancel(context.Background())
	src2 := &sliceIterator{n: 10_000}
	it2, release2 := p2.iterator(ctx2, src2)
	defer release2()
	for range 3 {
		it2.Next()
	}
	cancel2()
	if it2.Next() || !errors.Is(it2.Err(), context.Canceled) || src2.calls != 3 {
		t.Fatalf("unpaced: next after cancel read (%d reads, err %v)", src2.calls, it2.Err())
	}
}

// TestPacedIteratorWallClockCancel: a read paced to one entry in 1000 s
// returns as soon as its context is canceled.
func TestPacedIteratorWallClockCancel(t *testing.T) {
	p := newPacer(Config{CommitReadRate: 0.001, CommitPacing: CommitPacing{Floor: 0.001}}, wallClock{})
	ctx, cancel := context.WithCancel(context.Background())
	src := &sliceIterator{n: 10}
	it, release := p.iterator(ctx, src)
	defer release()
	if !it.Next() {
		t.Fatal("first entry not read")
	}
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if it.Next() || !errors.Is(it.Err(), context.Canceled) || src.calls != 1 {
		t.Fatalf("paced read after cancel: %d reads, err %v", src.calls, it.Err())
	}
}

// TestPacerRelease: a commit that stopped reading no longer counts, so the
// writes that follow set the baseline again.
func TestPacerRelease(t *testing.T) {
	s := newPaceSim(t, Config{})
	s.run(time.Second)
	s.startCommit()
	s.stopCommit()
	if s.p.readers != 0 {
		t.Fatalf("%d readers after release", s.p.readers)
	}
	s.latency = func(float64) time.Duration { return 3 * time.Millisecond }
	s.run(2 * time.Second)
	if s.p.baseline < 2*time.Millisecond {
		t.Fatalf("baseline %v: writes with no commit reading did not move it", s.p.baseline)
	}
}

// TestPaceStalledWrites: writes under way that do not complete within an
// interval are congestion, not an absence of writers: the rate is cut,
// never lifted to full speed.
func TestPaceStalledWrites(t *testing.T) {
	s := newPaceSim(t, Config{})
	s.run(time.Second)
	s.startCommit()
	s.run(200 * time.Millisecond)
	before := s.p.rate
	s.writing = false
	s.p.inflight.Add(1)
	s.run(time.Second)
	if math.IsInf(s.p.rate, 1) || s.p.rate >= before {
		t.Fatalf("rate %v after 1s of stalled writes (was %v)", s.p.rate, before)
	}
	s.p.inflight.Add(-1)
	s.run(time.Second)
	if !math.IsInf(s.p.rate, 1) {
		t.Fatalf("rate %v once the writers are gone, want unpaced", s.p.rate)
	}
}

// TestPaceStagedThenCommitted: a client that stages and then commits is no
// writer to protect: the commit, started low because writes were just
// seen, runs at full speed after one interval.
func TestPaceStagedThenCommitted(t *testing.T) {
	s := newPaceSim(t, Config{})
	s.run(time.Second)
	s.writing = false
	s.startCommit()
	if math.IsInf(s.p.rate, 1) {
		t.Fatal("commit right after writes started at full speed")
	}
	s.run(DefaultCommitPaceInterval + time.Millisecond)
	if !math.IsInf(s.p.rate, 1) {
		t.Fatalf("rate %v one interval after the last write, want unpaced", s.p.rate)
	}
}

// TestPaceFirstEntriesFree: a commit that starts right after writes (its
// own staging, say) starts low, but reads its first paceFree entries
// without waiting: a commit of a few thousand entries is not held back
// for writes that are over; it is paced from the next chunk on. An
// operator's rate holds from the first entry.
func TestPaceFirstEntriesFree(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		min, max int // the first wait comes before an entry in [min, max]
	}{
		{"adaptive", Config{}, paceFree + 1, paceFree + paceChunk + 1},
		{"operator rate", Config{CommitReadRate: 10_000}, 1, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := newTestPacer(tc.cfg)
			start := p.writeStarted()
			c.now = c.now.Add(time.Millisecond)
			p.writeDone(start, nil)
			read, firstWait := 0, 0
			c.onSleep = func(time.Duration) {
				if firstWait == 0 {
					firstWait = read + 1
				}
			}
			it, release := p.iterator(context.Background(), &sliceIterator{n: 10_000})
			defer release()
			if math.IsInf(p.rate, 1) {
				t.Fatal("a commit right after writes started unpaced")
			}
			for it.Next() {
				read++
			}
			if err := it.Err(); err != nil || read != 10_000 {
				t.Fatalf("read %d entries, err %v", read, err)
			}
			if firstWait < tc.min || firstWait > tc.max {
				t.Fatalf("first wait before entry %d, want within [%d, %d]", firstWait, tc.min, tc.max)
			}
		})
	}
}
