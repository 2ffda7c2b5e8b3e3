package graveler

import (
	"context"
	"time"
)

// pacedIterator holds a commit's read of its staged entries to a rate
// (Config.CommitReadRate). A commit of many entries otherwise takes all the
// CPU and store capacity it can, and the writers of the branch, which never
// wait for it, still queue behind it for a CPU; pacing trades commit time
// for their latency. It sleeps after every chunk of entries, so the staging
// iterator's page reads are spread out too.
type pacedIterator struct {
	ValueIterator
	ctx   context.Context
	rate  float64
	chunk int
	start time.Time
	n     int
	err   error
}

func newPacedIterator(ctx context.Context, it ValueIterator, rate float64) ValueIterator {
	if rate <= 0 {
		return it
	}
	// About a thousand sleeps a second: smooth, without a timer per entry.
	return &pacedIterator{ValueIterator: it, ctx: ctx, rate: rate, chunk: max(1, int(rate/1000)), start: time.Now()}
}

func (p *pacedIterator) Next() bool {
	if p.err != nil || !p.ValueIterator.Next() {
		return false
	}
	p.n++
	if p.n%p.chunk != 0 {
		return true
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.ctx.Done():
			p.err = p.ctx.Err()
			return false
		}
	}
	return true
}

func (p *pacedIterator) Err() error {
	if p.err != nil {
		return p.err
	}
	return p.ValueIterator.Err()
}
