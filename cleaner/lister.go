package cleaner

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/kv"
)

// PartitionLister is the optional ability the sweep needs: list the
// partitions (holding at least one key) whose names start with prefix,
// each once, in no promised order (etcd's is that of the partitions' keys,
// so "a-b/" comes before "a/"). An error is yielded at most once, last.
type PartitionLister interface {
	ListPartitions(ctx context.Context, prefix []byte) iter.Seq2[[]byte, error]
}

// PartitionCounter is an optional ability of a PartitionLister: count a
// partition's keys without reading them (used by dry runs).
type PartitionCounter interface {
	CountPartition(ctx context.Context, partition []byte) (int64, error)
}

// EtcdLister lists the partitions of an etcdkv store from the raw keys
// under its root prefix: "<root>/<partition>/<key>".
type EtcdLister struct {
	cli  *clientv3.Client
	root string // with a trailing '/'
}

var (
	_ PartitionLister  = (*EtcdLister)(nil)
	_ PartitionCounter = (*EtcdLister)(nil)
)

// NewEtcdLister lists partitions under root (etcdkv.Store.Prefix()) with
// cli (etcdkv.Store.Client()).
func NewEtcdLister(cli *clientv3.Client, root string) *EtcdLister {
	return &EtcdLister{cli: cli, root: strings.TrimRight(root, "/") + "/"}
}

// ListPartitions reads one key per partition: after finding a key it
// jumps past the end of that key's partition, so the cost grows with the
// number of partitions, not with the keys in them.
func (l *EtcdLister) ListPartitions(ctx context.Context, prefix []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		base := l.root + string(prefix)
		from, end := base, clientv3.GetPrefixRangeEnd(base)
		for {
			key, ok, err := l.first(ctx, from, end)
			if err != nil {
				yield(nil, fmt.Errorf("cleaner: list partitions under %q: %w", base, err))
				return
			}
			if !ok {
				return
			}
			rest := key[len(base):]
			i := strings.IndexByte(rest, '/')
			if i < 0 {
				// A key directly under the prefix is no partition; step over it.
				from = key + "\x00"
				continue
			}
			part := string(prefix) + rest[:i]
			if !yield([]byte(part), nil) {
				return
			}
			from = clientv3.GetPrefixRangeEnd(l.root + part + "/")
		}
	}
}

// first returns the first key in [from, end). It prefers a keys-only
// RangeStream, cancelled after its first key: a limited Range makes etcd
// count every remaining key of the range, which would make listing a
// prefix with millions of staged keys slow. Servers without RangeStream
// get the limited Range.
func (l *EtcdLister) first(ctx context.Context, from, end string) (string, bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	ch, err := l.cli.GetStream(sctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly())
	if err == nil {
		defer func() {
			cancel()
			for range ch { // the client's goroutine blocks until ch is drained
			}
		}()
		for resp := range ch {
			if err = resp.Err(); err != nil {
				break
			}
			if len(resp.Kvs) > 0 {
				return string(resp.Kvs[0].Key), true, nil
			}
		}
		if err == nil {
			return "", false, nil
		}
	} else {
		cancel()
	}
	if status.Code(err) != codes.Unimplemented {
		return "", false, err
	}
	resp, err := l.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return "", false, err
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Key), true, nil
}

// CountPartition counts a partition's keys with a count-only range.
func (l *EtcdLister) CountPartition(ctx context.Context, partition []byte) (int64, error) {
	resp, err := l.cli.Get(ctx, l.root+string(partition)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("cleaner: count partition %q: %w", partition, err)
	}
	return resp.Count, nil
}

// MemoryLister lists a kv.MemoryStore's partitions.
type MemoryLister struct{ s *kv.MemoryStore }

var _ PartitionLister = MemoryLister{}

// NewMemoryLister lists s's partitions.
func NewMemoryLister(s *kv.MemoryStore) MemoryLister { return MemoryLister{s: s} }

// ListPartitions lists a snapshot of the store's partitions.
func (l MemoryLister) ListPartitions(ctx context.Context, prefix []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(nil, err)
			return
		}
		parts := l.s.Partitions()
		slices.Sort(parts)
		for _, p := range parts {
			if bytes.HasPrefix([]byte(p), prefix) && !yield([]byte(p), nil) {
				return
			}
		}
	}
}
