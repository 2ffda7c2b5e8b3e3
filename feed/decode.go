package feed

import (
	"bytes"
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/internal/ctxtime"
	"graveler/keys"
)

// repoState is what the decoder knows of a repository record: the
// incarnation it names and its state. Only the partition of the active
// incarnation a record names produces events.
type repoState struct {
	uid   graveler.UniqueID
	state graveler.RepositoryState
}

// decoder turns the etcd events of the watched range into ref events. Its
// state is the repository records as of the last revision applied, so it
// must see every revision after the one it was loaded at, in order. Not
// safe for concurrent use: the hub and each catch-up have their own.
type decoder struct {
	f     *Feed
	repos map[graveler.RepositoryID]repoState
	// pending holds the states a revision being applied changed (nil:
	// removed); they replace those of repos once the whole revision is
	// decoded, so a revision whose decoding fails leaves no trace and is
	// decoded again from the same state.
	pending map[graveler.RepositoryID]*repoState
}

func (d *decoder) state(name graveler.RepositoryID) (repoState, bool) {
	if p, ok := d.pending[name]; ok {
		if p == nil {
			return repoState{}, false
		}
		return *p, true
	}
	st, ok := d.repos[name]
	return st, ok
}

func (d *decoder) set(name graveler.RepositoryID, st *repoState) {
	if d.pending == nil {
		d.pending = map[graveler.RepositoryID]*repoState{}
	}
	d.pending[name] = st
}

// newDecoder loads the repository records at rev (0: the current
// revision) and returns the decoder and the revision it was loaded at. A
// compacted rev is a *CompactedError.
func (f *Feed) newDecoder(ctx context.Context, rev int64) (*decoder, int64, error) {
	d := &decoder{f: f, repos: map[graveler.RepositoryID]repoState{}}
	asked := rev
	err := f.pages(ctx, f.reposPrefix, clientv3.GetPrefixRangeEnd(f.reposPrefix), &rev, func(kv *mvccpb.KeyValue) error {
		name, rec, ok := f.repositoryRecord(kv)
		if ok {
			d.repos[name] = repoState{uid: rec.UniqueID, state: rec.State}
		}
		return nil
	})
	if err != nil {
		return nil, 0, f.readErr(ctx, "read the repository records", asked, err)
	}
	return d, rev, nil
}

// repositoryRecord decodes a repository record read from etcd; ok is false
// for a key that is no repository record and (logged) for a record that
// does not decode.
func (f *Feed) repositoryRecord(kv *mvccpb.KeyValue) (graveler.RepositoryID, *graveler.Repository, bool) {
	name, ok := f.repositoryName(kv.Key)
	if !ok {
		return "", nil, false
	}
	rec, err := ref.DecodeRepository(kv.Value)
	if err != nil {
		f.log.Warn("feed: undecodable repository record skipped", zap.String("repository", string(name)), zap.Int64("revision", kv.ModRevision), zap.Error(err))
		return "", nil, false
	}
	return name, rec, true
}

// repositoryName is the repository a raw etcd key is the record of.
func (f *Feed) repositoryName(raw []byte) (graveler.RepositoryID, bool) {
	part, key, ok := f.store.ParseRawKey(raw)
	if !ok || string(part) != keys.PartitionGraveler {
		return "", false
	}
	name, err := keys.ParseRepository(key)
	if err != nil {
		return "", false
	}
	return graveler.RepositoryID(name), true
}

// apply decodes the events of revision rev, all of them, in etcd's order,
// and advances the repository states. It fails only when ctx ends: reads
// it needs are retried while etcd is unreachable.
func (d *decoder) apply(ctx context.Context, rev int64, evs []*clientv3.Event) ([]Event, error) {
	clear(d.pending)
	var out []Event
	for _, ev := range evs {
		part, key, ok := d.f.store.ParseRawKey(ev.Kv.Key)
		if !ok {
			continue
		}
		var err error
		switch {
		case string(part) == keys.PartitionGraveler:
			if name, perr := keys.ParseRepository(key); perr == nil {
				out, err = d.repository(ctx, rev, graveler.RepositoryID(name), ev, out)
			}
		case bytes.HasPrefix(part, keys.RepositoryPartitionPrefix()):
			out, err = d.incarnation(ctx, rev, part, key, ev, out)
		}
		// graveler_deleted (the cleaner's work list) and anything else in
		// the range are no ref changes.
		if err != nil {
			return nil, err
		}
	}
	for name, st := range d.pending {
		if st == nil {
			delete(d.repos, name)
		} else {
			d.repos[name] = *st
		}
	}
	return out, nil
}

// repository handles a write of a repository record. A repository is
// created when its record becomes active, and deleted by the first write
// that takes an active record out of active (or removes it).
func (d *decoder) repository(ctx context.Context, rev int64, name graveler.RepositoryID, ev *clientv3.Event, out []Event) ([]Event, error) {
	prev, had := d.state(name)
	wasActive := had && prev.state == graveler.RepositoryStateActive
	var rec *graveler.Repository
	if ev.Type == mvccpb.PUT {
		r, err := ref.DecodeRepository(ev.Kv.Value)
		if err != nil {
			// Nothing is known of the record any more: its partition stays
			// silent until a record that decodes says otherwise.
			d.f.log.Warn("feed: undecodable repository record", zap.String("repository", string(name)), zap.Int64("revision", rev), zap.Error(err))
		}
		rec = r
	}
	if rec == nil {
		d.set(name, nil)
		if wasActive {
			out = append(out, Event{Type: RepositoryDeleted, Revision: rev, Repository: name})
		}
		return out, nil
	}
	d.set(name, &repoState{uid: rec.UniqueID, state: rec.State})
	nowActive := rec.State == graveler.RepositoryStateActive
	if wasActive && (!nowActive || prev.uid != rec.UniqueID) {
		out = append(out, Event{Type: RepositoryDeleted, Revision: rev, Repository: name})
		wasActive = false
	}
	if !nowActive || wasActive {
		return out, nil
	}
	// The default branch was written while the record was initial, which
	// announced nothing: the creation carries its head.
	created := Event{Type: RepositoryCreated, Revision: rev, Repository: name, RepositoryInfo: rec}
	part := keys.RepositoryPartition(string(name), string(rec.UniqueID))
	data, err := d.f.readAt(ctx, d.f.store.RawKey(part, keys.Branch(string(rec.DefaultBranchID))), rev)
	if err != nil {
		return nil, err
	}
	if data != nil {
		if b, err := ref.DecodeBranch(data); err == nil {
			created.CommitID = b.CommitID
		} else {
			d.f.log.Warn("feed: undecodable default branch record", zap.String("repository", string(name)), zap.Error(err))
		}
	}
	return append(out, created), nil
}

// incarnation handles a write in a repository partition: only the
// partition of the active incarnation counts.
func (d *decoder) incarnation(ctx context.Context, rev int64, part, key []byte, ev *clientv3.Event, out []Event) ([]Event, error) {
	repo, uid, err := keys.ParseRepositoryPartition(part)
	if err != nil {
		return out, nil
	}
	st, ok := d.state(graveler.RepositoryID(repo))
	if !ok || string(st.uid) != uid {
		return out, nil
	}
	name := graveler.RepositoryID(repo)
	switch {
	case bytes.HasPrefix(key, []byte(keys.CommitsPrefix)):
		// Commit records come before the branch moves that name them:
		// keeping them spares reading them back.
		if ev.Type == mvccpb.PUT {
			if c, err := ref.DecodeCommit(ev.Kv.Value); err == nil {
				d.f.commits.put(commitKey(part, graveler.CommitID(key[len(keys.CommitsPrefix):])), c)
			}
		}
		return out, nil
	case st.state != graveler.RepositoryStateActive:
		// Writes of a creation (initial) or of a deletion (deleting).
		return out, nil
	case bytes.HasPrefix(key, []byte(keys.BranchesPrefix)):
		id, err := keys.ParseRecord(keys.BranchesPrefix, key)
		if err != nil {
			return out, nil
		}
		return d.branch(ctx, rev, name, part, graveler.BranchID(id), ev, out)
	case bytes.HasPrefix(key, []byte(keys.TagsPrefix)):
		id, err := keys.ParseRecord(keys.TagsPrefix, key)
		if err != nil {
			return out, nil
		}
		return d.tag(rev, name, graveler.TagID(id), ev, out), nil
	}
	return out, nil
}

// hasCommit: the causes whose move carries the new commit's record.
func hasCommit(c graveler.BranchChange) bool {
	switch c {
	case graveler.ChangeCommit, graveler.ChangeMerge, graveler.ChangeRevert, graveler.ChangeCherryPick:
		return true
	}
	return false
}

func (d *decoder) branch(ctx context.Context, rev int64, repo graveler.RepositoryID, part []byte, id graveler.BranchID, ev *clientv3.Event, out []Event) ([]Event, error) {
	var prev *graveler.Branch
	if ev.PrevKv != nil {
		b, err := ref.DecodeBranch(ev.PrevKv.Value)
		if err == nil {
			prev = b
		}
	}
	e := Event{Revision: rev, Repository: repo, Branch: id}
	if ev.Type == mvccpb.DELETE {
		e.Type = BranchDeleted
		if prev != nil {
			e.OldCommitID = prev.CommitID
		}
		return append(out, e), nil
	}
	b, err := ref.DecodeBranch(ev.Kv.Value)
	if err != nil {
		d.f.log.Warn("feed: undecodable branch record skipped", zap.String("repository", string(repo)),
			zap.String("branch", string(id)), zap.Int64("revision", rev), zap.Error(err))
		return out, nil
	}
	e.CommitID, e.Cause = b.CommitID, b.Change
	switch {
	case ev.IsCreate():
		e.Type = BranchCreated
		return append(out, e), nil
	case b.Change != graveler.ChangeNone:
		e.Type = BranchMoved
	case prev != nil && prev.CommitID != b.CommitID:
		// Written by a server that did not record what its writes did.
		e.Type = BranchMoved
	default:
		// Sealing or releasing a staging token.
		return out, nil
	}
	if prev != nil {
		e.OldCommitID = prev.CommitID
	}
	if hasCommit(b.Change) {
		c, err := d.commit(ctx, part, b.CommitID, rev)
		if err != nil {
			return nil, err
		}
		e.Commit = c
	}
	return append(out, e), nil
}

// tag: tags are created and deleted, never rewritten; a rewrite to
// another commit (by hand) reads as a deletion and a creation.
func (d *decoder) tag(rev int64, repo graveler.RepositoryID, id graveler.TagID, ev *clientv3.Event, out []Event) []Event {
	var prev graveler.CommitID
	if ev.PrevKv != nil {
		prev, _ = ref.DecodeTag(ev.PrevKv.Value)
	}
	if ev.Type == mvccpb.DELETE {
		return append(out, Event{Type: TagDeleted, Revision: rev, Repository: repo, Tag: id, OldCommitID: prev})
	}
	c, err := ref.DecodeTag(ev.Kv.Value)
	if err != nil {
		d.f.log.Warn("feed: undecodable tag record skipped", zap.String("repository", string(repo)),
			zap.String("tag", string(id)), zap.Int64("revision", rev), zap.Error(err))
		return out
	}
	if !ev.IsCreate() {
		if prev == c {
			return out
		}
		out = append(out, Event{Type: TagDeleted, Revision: rev, Repository: repo, Tag: id, OldCommitID: prev})
	}
	return append(out, Event{Type: TagCreated, Revision: rev, Repository: repo, Tag: id, CommitID: c})
}

func commitKey(part []byte, id graveler.CommitID) string {
	return string(part) + "\x00" + string(id)
}

// commit returns the record of commit id in partition part, from the
// cache or read at rev; nil when it cannot be found or decoded.
func (d *decoder) commit(ctx context.Context, part []byte, id graveler.CommitID, rev int64) (*graveler.Commit, error) {
	k := commitKey(part, id)
	if c, ok := d.f.commits.get(k); ok {
		return c, nil
	}
	data, err := d.f.readAt(ctx, d.f.store.RawKey(part, keys.Commit(string(id))), rev)
	if err != nil || data == nil {
		return nil, err
	}
	c, err := ref.DecodeCommit(data)
	if err != nil {
		d.f.log.Warn("feed: undecodable commit record", zap.String("partition", string(part)), zap.String("commit", string(id)), zap.Error(err))
		return nil, nil
	}
	d.f.commits.put(k, c)
	return c, nil
}

// readAt reads one key at rev (the latest revision when rev is compacted:
// the records it serves are immutable, or only informative); nil when
// missing. While etcd is unreachable it retries until ctx ends: the hub and
// the catch-ups have nothing else to do meanwhile.
func (f *Feed) readAt(ctx context.Context, key string, rev int64) ([]byte, error) {
	wait := 50 * time.Millisecond
	for {
		resp, err := f.cli.Get(ctx, key, clientv3.WithRev(rev))
		switch {
		case err == nil:
			if len(resp.Kvs) == 0 {
				return nil, nil
			}
			return resp.Kvs[0].Value, nil
		case isCompacted(err):
			rev = 0
			continue
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		f.log.Warn("feed: read failed; retrying", zap.String("key", key), zap.Duration("wait", wait), zap.Error(err))
		if !ctxtime.Sleep(ctx, wait) {
			return nil, ctx.Err()
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// pages reads [from, end) in pages of Config.PageSize keys at *rev, calling
// fn for each key; with *rev == 0 the first page sets *rev to the
// revision it read at. fn's error stops the walk and is returned.
func (f *Feed) pages(ctx context.Context, from, end string, rev *int64, fn func(*mvccpb.KeyValue) error) error {
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(f.cfg.PageSize))}
		if *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		resp, err := f.cli.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		if *rev == 0 {
			*rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
