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
// trees (a tree's root and inner nodes, read and walked) and as many for
// ranges: a tree's ranges are checked while its nodes and the next trees
// are read. Tree workers feed range workers and never the reverse, so
// neither pool can wait on itself; a tree worker may wait for another to
// finish a node both reach, which cannot cycle (a node's descendants are
// named by content hashes, never itself).
type blobChecks struct {
	r      *run
	ctx    context.Context
	cancel context.CancelFunc
	// seen: roots handed out; used by the caller's goroutine only.
	seen    map[string]bool
	metaCh  chan metaTask
	rangeCh chan rangeTask
	metaWG  sync.WaitGroup
	rangeWG sync.WaitGroup
	mu      sync.Mutex
	ranges  map[string]*rangeEntry
	nodes   map[string]*nodeEntry
}

type metaTask struct {
	ns     graveler.StorageNamespace
	id     graveler.MetaRangeID
	repo   string
	commit graveler.CommitID
}

type rangeTask struct {
	meta metaTask
	// parent is the inner node naming the range.
	parent graveler.MetaRangeID
	d      committed.RangeDescriptor
}

// rangeEntry is the outcome of checking one range, shared by every
// node that names it: each object is read once per run.
type rangeEntry struct {
	done chan struct{}
	// ok: present (and with Full, intact); summary is set with Full.
	ok      bool
	summary committed.RangeSummary
}

// nodeEntry is the outcome of reading one inner node (or root): each is
// read and its subtree walked once per run.
type nodeEntry struct {
	done chan struct{}
	node *committed.TreeNode
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
		nodes:   map[string]*nodeEntry{},
	}
	for range n {
		b.metaWG.Go(b.metaWorker)
		b.rangeWG.Go(b.rangeWorker)
	}
	return b
}

// inPack says which pack holds an object, for a finding's detail: a
// missing pack is every object in it missing.
func inPack(loc committed.Location) string {
	if !loc.Packed() {
		return ""
	}
	return fmt.Sprintf(", stored in pack %s", committed.PackObjectName(loc.Pack))
}

// storedKey names one stored copy of the object d names: copies of one
// object in different packs are each checked, since a tree reaches its
// objects through the copies its nodes name.
func storedKey(ns graveler.StorageNamespace, d committed.RangeDescriptor) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d", ns, d.ID, d.Loc.Pack, d.Loc.Offset)
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
	for t := range b.metaCh {
		if b.ctx.Err() != nil {
			continue
		}
		b.node(t, nil, 0)
	}
}

// node checks inner node id of tree t (its root when parent is nil, else
// the child parent names in a node of level parentLevel), then its
// subtree: nodes here, ranges on the range workers.
func (b *blobChecks) node(t metaTask, parent *committed.RangeDescriptor, parentLevel int) {
	r := b.r
	id := t.id
	if parent != nil {
		id = graveler.MetaRangeID(parent.ID)
	}
	key := string(t.ns) + "\x00" + string(id)
	if parent != nil {
		key = storedKey(t.ns, *parent)
	}
	b.mu.Lock()
	e, found := b.nodes[key]
	if !found {
		e = &nodeEntry{done: make(chan struct{})}
		b.nodes[key] = e
	}
	b.mu.Unlock()
	if found {
		// Read (and its subtree walked) by whoever came first; only this
		// parent's entry is left to compare.
		select {
		case <-e.done:
		case <-b.ctx.Done():
			return
		}
		if parent != nil && e.node != nil && r.c.cfg.Full {
			b.matchNode(t, e.node, parent, parentLevel)
		}
		return
	}
	var n *committed.TreeNode
	var err error
	if parent == nil {
		n, err = committed.ReadTreeNode(b.ctx, r.c.blobs, t.ns, id)
	} else {
		n, err = committed.ReadChildNode(b.ctx, r.c.blobs, t.ns, *parent)
	}
	r.stats(func(st *Stats) { st.MetaRanges++ })
	res := fmt.Sprintf("metarange %s in %s", id, t.ns)
	where := fmt.Sprintf("commit %s names it", t.commit)
	if parent != nil {
		where = fmt.Sprintf("an inner node of tree %s (reached from commit %s)%s", t.id, t.commit, inPack(parent.Loc))
	}
	switch {
	case err == nil:
		e.node = n
	case errors.Is(err, committed.ErrBlobNotFound):
		r.find(KindMetaRangeMissing, t.repo, res, "%s; the blob store does not hold it", where)
	case errors.Is(err, committed.ErrCorrupt), errors.Is(err, committed.ErrInvalidID):
		r.find(KindMetaRangeCorrupt, t.repo, res, "%s: %v", where, err)
	case b.ctx.Err() == nil:
		r.problem("read %s: %v", res, err)
	}
	close(e.done)
	if n == nil {
		return
	}
	if parent != nil && r.c.cfg.Full {
		b.matchNode(t, n, parent, parentLevel)
	}
	for i := range n.Children {
		if b.ctx.Err() != nil {
			return
		}
		if n.Level > 1 {
			b.node(t, &n.Children[i], n.Level)
			continue
		}
		select {
		case b.rangeCh <- rangeTask{meta: t, parent: id, d: n.Children[i]}:
		case <-b.ctx.Done():
		}
	}
}

// matchNode reports an inner node that does not match its parent's entry.
func (b *blobChecks) matchNode(t metaTask, n *committed.TreeNode, parent *committed.RangeDescriptor, parentLevel int) {
	if err := n.Matches(*parent, parentLevel); err != nil {
		b.r.find(KindMetaRangeCorrupt, t.repo, fmt.Sprintf("metarange %s in %s", parent.ID, t.ns),
			"an inner node of tree %s (reached from commit %s): %v", t.id, t.commit, err)
	}
}

func (b *blobChecks) rangeWorker() {
	for t := range b.rangeCh {
		if b.ctx.Err() != nil {
			continue
		}
		key := storedKey(t.meta.ns, t.d)
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
					"in metarange %s of tree %s (reached from commit %s): %v", t.parent, t.meta.id, t.meta.commit, err)
			}
		}
	}
}

// checkRange checks one range: its existence, or with Full its content.
func (b *blobChecks) checkRange(e *rangeEntry, t rangeTask) {
	r := b.r
	res := fmt.Sprintf("range %s in %s", t.d.ID, t.meta.ns)
	where := fmt.Sprintf("metarange %s of tree %s (reached from commit %s) names it%s", t.parent, t.meta.id, t.meta.commit, inPack(t.d.Loc))
	var err error
	if r.c.cfg.Full {
		var s committed.RangeSummary
		s, err = committed.VerifyRange(b.ctx, r.c.blobs, t.meta.ns, t.d.ID, t.d.Loc)
		r.stats(func(st *Stats) { st.Ranges++; st.RangeBytes += int64(s.Size) })
		e.ok, e.summary = err == nil, s
	} else {
		var ok bool
		ok, err = committed.RangeExists(b.ctx, r.c.blobs, t.meta.ns, t.d.ID, t.d.Loc)
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
