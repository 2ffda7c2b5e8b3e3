package feed

import (
	"context"
	"errors"
	"iter"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
)

// errStopped: the consumer of the initial state stopped reading it.
var errStopped = errors.New("feed: initial state: stopped")

// initialState yields the refs that exist at one revision: every active
// repository (or only repo), each followed by its branches and its tags.
// The first read fixes the revision and stores it in *rev before anything
// is yielded. It reads in pages at that revision and holds at most a page
// of repository records and one of branches or tags.
func (f *Feed) initialState(ctx context.Context, repo graveler.RepositoryID, rev *int64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		from, end := f.reposPrefix, clientv3.GetPrefixRangeEnd(f.reposPrefix)
		if repo != "" {
			from = f.reposPrefix + string(repo)
			end = from + "\x00"
		}
		err := f.pages(ctx, from, end, rev, func(kv *mvccpb.KeyValue) error {
			name, rec, ok := f.repositoryRecord(kv)
			if !ok || rec.State != graveler.RepositoryStateActive {
				return nil
			}
			if !yield(Event{Type: RepositoryExists, Revision: *rev, Repository: name, RepositoryInfo: rec}, nil) {
				return errStopped
			}
			part := keys.RepositoryPartition(string(name), string(rec.UniqueID))
			if err := f.initialRecords(ctx, *rev, name, part, keys.BranchesPrefix, yield); err != nil {
				return err
			}
			return f.initialRecords(ctx, *rev, name, part, keys.TagsPrefix, yield)
		})
		if err != nil && !errors.Is(err, errStopped) {
			yield(Event{}, f.readErr(ctx, "read the initial state", *rev, err))
		}
	}
}

// initialRecords yields the branches or the tags (prefix) of a repository
// partition at rev.
func (f *Feed) initialRecords(ctx context.Context, rev int64, repo graveler.RepositoryID, part []byte, prefix string, yield func(Event, error) bool) error {
	raw := f.store.RawPrefix(part) + prefix
	return f.pages(ctx, raw, clientv3.GetPrefixRangeEnd(raw), &rev, func(kv *mvccpb.KeyValue) error {
		id := string(kv.Key[len(raw):])
		e := Event{Revision: rev, Repository: repo}
		if prefix == keys.BranchesPrefix {
			b, err := ref.DecodeBranch(kv.Value)
			if err != nil {
				f.log.Warn("feed: undecodable branch record left out of an initial state", zap.String("repository", string(repo)), zap.String("branch", id), zap.Error(err))
				return nil
			}
			e.Type, e.Branch, e.CommitID = BranchExists, graveler.BranchID(id), b.CommitID
		} else {
			c, err := ref.DecodeTag(kv.Value)
			if err != nil {
				f.log.Warn("feed: undecodable tag record left out of an initial state", zap.String("repository", string(repo)), zap.String("tag", id), zap.Error(err))
				return nil
			}
			e.Type, e.Tag, e.CommitID = TagExists, graveler.TagID(id), c
		}
		if !yield(e, nil) {
			return errStopped
		}
		return nil
	})
}
