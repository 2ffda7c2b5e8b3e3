package cleaner

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/kv"
)

// PartitionLister is the optional ability the sweep needs: list the
// partitions (holding at least one key) whose names start with prefix,
// each once, in no promised order. An error is yielded at most once,
// last. *etcdkv.Store has it (its keys-only ranges skip from one
// partition to the next), so New finds it on an etcd store without
// Config.Lister.
type PartitionLister interface {
	ListPartitions(ctx context.Context, prefix []byte) iter.Seq2[[]byte, error]
}

// PartitionCounter is an optional ability of a PartitionLister: count a
// partition's keys without reading them (used by dry runs). *etcdkv.Store
// has it.
type PartitionCounter interface {
	CountPartition(ctx context.Context, partition []byte) (int64, error)
}

// NewEtcdLister lists and counts the partitions of the etcdkv store under
// root on cli: it is that store's own ListPartitions and CountPartition,
// for code that holds the client rather than the store (code holding the
// *etcdkv.Store passes it instead). An invalid root fails every call.
func NewEtcdLister(cli *clientv3.Client, root string) PartitionLister {
	s, err := etcdkv.NewFromClient(cli, etcdkv.Config{Prefix: root})
	if err != nil {
		return failedLister{fmt.Errorf("cleaner: etcd lister: %w", err)}
	}
	return s
}

// failedLister fails every call with err.
type failedLister struct{ err error }

func (l failedLister) ListPartitions(context.Context, []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) { yield(nil, l.err) }
}

func (l failedLister) CountPartition(context.Context, []byte) (int64, error) { return 0, l.err }

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
