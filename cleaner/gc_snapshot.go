package cleaner

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/kv"
)

// snapshot reads the store as a collection's mark needs it: on etcd at
// one revision, so every repository record, claim and commit is read as
// of one instant; on another store by plain scans begun after the mark
// time, which is enough: records that count are never removed while
// their repository lives, so a later scan sees at least what was there.
type snapshot interface {
	// revision is the etcd revision read at (0: none).
	revision() int64
	// scan walks the keys of partition that begin with prefix, in order.
	scan(ctx context.Context, partition []byte, prefix string) iter.Seq2[kv.Entry, error]
}

// snapshotPage is how many keys one read of an etcd snapshot returns.
const snapshotPage = 512

// snapshotReadTimeout bounds each read of an etcd snapshot.
const snapshotReadTimeout = 30 * time.Second

func (c *Cleaner) snapshot(ctx context.Context) (snapshot, error) {
	es, ok := c.store.(*etcdkv.Store)
	if !ok {
		return liveSnapshot{c.store}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, snapshotReadTimeout)
	defer cancel()
	resp, err := es.Client().Get(rctx, es.Prefix()+"/", clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("read etcd's revision: %w", err)
	}
	return &etcdSnapshot{s: es, rev: resp.Header.Revision}, nil
}

type liveSnapshot struct{ s kv.Store }

func (liveSnapshot) revision() int64 { return 0 }

func (l liveSnapshot) scan(ctx context.Context, partition []byte, prefix string) iter.Seq2[kv.Entry, error] {
	return func(yield func(kv.Entry, error) bool) {
		for e, err := range l.s.Scan(ctx, partition, kv.ScanOptions{Start: []byte(prefix)}) {
			if err != nil {
				yield(kv.Entry{}, err)
				return
			}
			if !strings.HasPrefix(string(e.Key), prefix) || !yield(e, nil) {
				return
			}
		}
	}
}

// etcdSnapshot reads through the store's client at rev. A revision
// compacted meanwhile fails the read (and so the collection, retried by
// the next one): never a read at another revision.
type etcdSnapshot struct {
	s   *etcdkv.Store
	rev int64
}

func (e *etcdSnapshot) revision() int64 { return e.rev }

func (e *etcdSnapshot) scan(ctx context.Context, partition []byte, prefix string) iter.Seq2[kv.Entry, error] {
	return func(yield func(kv.Entry, error) bool) {
		base := e.s.RawPrefix(partition)
		from, end := base+prefix, clientv3.GetPrefixRangeEnd(base+prefix)
		for {
			rctx, cancel := context.WithTimeout(ctx, snapshotReadTimeout)
			resp, err := e.s.Client().Get(rctx, from, clientv3.WithRange(end), clientv3.WithRev(e.rev), clientv3.WithLimit(snapshotPage))
			cancel()
			if err != nil {
				yield(kv.Entry{}, fmt.Errorf("read %q at revision %d: %w", partition, e.rev, err))
				return
			}
			for _, kv1 := range resp.Kvs {
				if !yield(kv.Entry{Key: kv1.Key[len(base):], Value: kv1.Value, Predicate: kv.NewPredicate(kv1.ModRevision)}, nil) {
					return
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				return
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
}
