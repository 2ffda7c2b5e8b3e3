package feed

import "time"

// BreakWatch ends the hub's current etcd watch, as a broken connection or
// a lost leader would.
// It waits for the hub to have a watch running (the hub may still be
// reading its start, or between two watches), so the break always
// happens.
func (f *Feed) BreakWatch() {
	for {
		f.mu.Lock()
		c := f.watchCancel
		f.mu.Unlock()
		if c != nil {
			c()
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// HubRevision is the revision up to which the hub has every change.
func (f *Feed) HubRevision() int64 { return f.coveredRev() }

// RingStart is the revision after which the hub's ring holds every change.
func (f *Feed) RingStart() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ringStart
}

// Ready reports whether the hub follows etcd.
func (f *Feed) Ready() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

// CatchingUp reports whether s reads etcd's history with a watch of its own.
func (s *Subscription) CatchingUp() bool { return s.phase == phaseCatchUp }

// SetRewatchHook makes the hub call hook before it re-establishes a broken
// watch.
func (f *Feed) SetRewatchHook(hook func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rewatchHook = hook
}

// Metrics, for tests that check them.
var (
	CatchUpsMetric = catchUps
	SlowMetric     = slowCloses
	RestartsMetric = watchRestarts
)
