package fsck

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"graveler/graveler"
	"graveler/graveler/committed"
)

// blobChecks checks committed objects on Config.Parallel goroutines for
// metaranges and as many for ranges: a metarange's ranges are checked
// while the next metaranges are read. Metarange workers feed range
// workers and never the reverse, so neither pool can wait on itself.
type blobChecks struct {
	r      *run
	ctx    context.Context
	cancel context.CancelFunc
	// seen: metaranges handed out; used by the caller's goroutine only.
	seen    map[string]bool
	metaCh  chan metaTask
	rangeCh chan rangeTask
	metaWG  sync.WaitGroup
	rangeWG sync.WaitGroup
	mu      sync.Mutex
	ranges  map[string]*rangeEntry
}

type metaTask struct {
	ns     graveler.StorageNamespace
	id     graveler.MetaRangeID
	repo   string
	commit graveler.CommitID
}

type rangeTask struct {
	meta metaTask
	d    committed.RangeDescriptor
}

// rangeEntry is the outcome of checking one range, shared by every
// metarange that names it: each object is read once per run.
type rangeEntry struct {
	done chan struct{}
	// ok: present (and with Full, intact); summary is set with Full.
	ok      bool
	summary committed.RangeSummary
}

func (r *run) startBlobChecks() *blobChecks {
	ctx, cancel := context.WithCancel(r.ctx)
	n := r.c.cfg.Parallel
	b := &blobChecks{
		r: r, ctx: ctx, cancel: cancel,
		seen:    map[string]bool{},
		metaCh:  make(chan metaTask, n),
		rangeCh: make(chan rangeTask, 4*n),
		ranges:  map[string]*rangeEntry{},
	}
	for range n {
		b.metaWG.Go(b.metaWorker)
		b.rangeWG.Go(b.rangeWorker)
	}
	return b
}

// metaRange queues the check of metarange id of ns (and of its ranges),
// once per run; commit of repo is the first to reach it.
func (b *blobChecks) metaRange(ns graveler.StorageNamespace, id graveler.MetaRangeID, repo string, commit graveler.CommitID) {
	key := string(ns) + "\x00" + string(id)
	if id == "" || b.seen[key] {
		return
	}
	b.seen[key] = true
	select {
	case b.metaCh <- metaTask{ns: ns, id: id, repo: repo, commit: commit}:
	case <-b.ctx.Done():
	}
}

// wait returns once every queued check is done.
func (b *blobChecks) wait() {
	close(b.metaCh)
	b.metaWG.Wait()
	close(b.rangeCh)
	b.rangeWG.Wait()
	b.cancel()
}

// stop abandons the checks not yet made.
func (b *blobChecks) stop() {
	b.cancel()
	b.wait()
}

func (b *blobChecks) metaWorker() {
	r := b.r
	for t := range b.metaCh {
		if b.ctx.Err() != nil {
			continue
		}
		ranges, err := committed.ReadMetaRange(b.ctx, r.c.blobs, t.ns, t.id)
		r.stats(func(st *Stats) { st.MetaRanges++ })
		res := fmt.Sprintf("metarange %s in %s", t.id, t.ns)
		switch {
		case err == nil:
		case errors.Is(err, committed.ErrBlobNotFound):
			r.find(KindMetaRangeMissing, t.repo, res, "commit %s names it; the blob store does not hold it", t.commit)
		case errors.Is(err, committed.ErrCorrupt), errors.Is(err, committed.ErrInvalidID):
			r.find(KindMetaRangeCorrupt, t.repo, res, "commit %s names it: %v", t.commit, err)
		case b.ctx.Err() == nil:
			r.problem("read %s: %v", res, err)
		}
		for _, d := range ranges {
			select {
			case b.rangeCh <- rangeTask{meta: t, d: d}:
			case <-b.ctx.Done():
			}
		}
	}
}

func (b *blobChecks) rangeWorker() {
	for t := range b.rangeCh {
		if b.ctx.Err() != nil {
			continue
		}
		key := string(t.meta.ns) + "\x00" + string(t.d.ID)
		b.mu.Lock()
		e, found := b.ranges[key]
		if !found {
			e = &rangeEntry{done: make(chan struct{})}
			b.ranges[key] = e
		}
		b.mu.Unlock()
		if !found {
			b.checkRange(e, t)
			close(e.done)
		} else {
			select {
			case <-e.done:
			case <-b.ctx.Done():
				continue
			}
		}
		if b.r.c.cfg.Full && e.ok {
			if err := e.summary.Matches(t.d); err != nil {
				b.r.find(KindRangeOutOfBounds, t.meta.repo, fmt.Sprintf("range %s in %s", t.d.ID, t.meta.ns),
					"in metarange %s (reached from commit %s): %v", t.meta.id, t.meta.commit, err)
			}
		}
	}
}

// checkRange checks one range: its existence, or with Full its content.
func (b *blobChecks) checkRange(e *rangeEntry, t rangeTask) {
	r := b.r
	res := fmt.Sprintf("range %s in %s", t.d.ID, t.meta.ns)
	where := fmt.Sprintf("metarange %s (reached from commit %s) names it", t.meta.id, t.meta.commit)
	var err error
	if r.c.cfg.Full {
		var s committed.RangeSummary
		s, err = committed.VerifyRange(b.ctx, r.c.blobs, t.meta.ns, t.d.ID)
		r.stats(func(st *Stats) { st.Ranges++; st.RangeBytes += int64(s.Size) })
		e.ok, e.summary = err == nil, s
	} else {
		var ok bool
		ok, err = committed.RangeExists(b.ctx, r.c.blobs, t.meta.ns, t.d.ID)
		r.stats(func(st *Stats) { st.Ranges++ })
		if err == nil && !ok {
			err = committed.ErrBlobNotFound
		}
		e.ok = err == nil
	}
	switch {
	case err == nil:
	case errors.Is(err, committed.ErrBlobNotFound):
		r.find(KindRangeMissing, t.meta.repo, res, "%s; the blob store does not hold it", where)
	case errors.Is(err, committed.ErrCorrupt), errors.Is(err, committed.ErrInvalidID):
		r.find(KindRangeCorrupt, t.meta.repo, res, "%s: %v", where, err)
	case b.ctx.Err() == nil:
		r.problem("check %s: %v", res, err)
	}
}
