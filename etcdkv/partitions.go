package etcdkv

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/kv"
)

// PartitionElement is the path element that holds a partition's keys
// under the root: the name with every '/' written as ':'. No partition
// name holds a ':' (kv.ValidatePartition), so the encoding is one to one,
// and an element holds no '/', so the first '/' after the root ends the
// partition: no partition's keys can fall under another's prefix,
// whatever the names ("x" with key "y/k" and "x/y" with key "k" are two
// etcd keys).
func PartitionElement(partition []byte) string {
	return strings.ReplaceAll(string(partition), "/", ":")
}

// RawPrefix is the etcd key prefix of every key of partition:
// <root>/<PartitionElement(partition)>/.
func (s *Store) RawPrefix(partition []byte) string {
	return s.cfg.Prefix + "/" + PartitionElement(partition) + "/"
}

// RawKey is the etcd key that holds key of partition.
func (s *Store) RawKey(partition, key []byte) string {
	return s.RawPrefix(partition) + string(key)
}

// ParseRawKey splits an etcd key under the store's root into the
// partition and key it holds; ok is false for a key no partition of this
// store can hold.
func (s *Store) ParseRawKey(raw []byte) (partition, key []byte, ok bool) {
	rest, found := strings.CutPrefix(string(raw), s.cfg.Prefix+"/")
	if !found {
		return nil, nil, false
	}
	elem, k, found := strings.Cut(rest, "/")
	if !found || k == "" {
		return nil, nil, false
	}
	partition = []byte(strings.ReplaceAll(elem, ":", "/"))
	if kv.ValidatePartition(partition) != nil {
		return nil, nil, false
	}
	return partition, []byte(k), true
}

// ListPartitions lists the partitions holding at least one key whose
// names start with prefix, each once, in no promised order (that of their
// etcd elements, so "a-b" comes before "a"). An error is yielded at most
// once, last. It reads one key per partition: after finding a key it
// jumps past the end of that key's partition, so the cost grows with the
// number of partitions, not with the keys in them. Keys under the root
// that no partition can hold are stepped over.
func (s *Store) ListPartitions(ctx context.Context, prefix []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		start := time.Now()
		var listErr error
		defer func() { observe("list_partitions", start, listErr) }()
		if err := s.checkOpen(); err != nil {
			listErr = err
			yield(nil, err)
			return
		}
		// A prefix is a partition name cut anywhere: what it holds must
		// be able to start a valid name.
		if err := kv.ValidatePartition(append(append([]byte(nil), prefix...), 'x')); err != nil {
			listErr = fmt.Errorf("etcdkv: list partitions: prefix %q: %w", prefix, err)
			yield(nil, listErr)
			return
		}
		root := s.cfg.Prefix + "/"
		base := root + PartitionElement(prefix)
		from, end := base, clientv3.GetPrefixRangeEnd(base)
		for from < end {
			key, ok, err := s.firstKey(ctx, from, end)
			if err != nil {
				listErr = fmt.Errorf("etcdkv: list partitions under %q: %w", base, err)
				yield(nil, listErr)
				return
			}
			if !ok {
				return
			}
			elem, _, found := strings.Cut(key[len(root):], "/")
			if !found {
				// A key right under the root is no partition's.
				from = key + "\x00"
				continue
			}
			from = clientv3.GetPrefixRangeEnd(root + elem + "/")
			part := []byte(strings.ReplaceAll(elem, ":", "/"))
			if kv.ValidatePartition(part) != nil {
				continue
			}
			if !yield(part, nil) {
				return
			}
		}
	}
}

// firstKey returns the first key in [from, end): the first of a
// keys-only range walk, which on etcd 3.7 is a RangeStream cancelled after
// its first chunk (a limited Range would count every remaining key of the
// range, slow under a partition of millions of staged keys).
func (s *Store) firstKey(ctx context.Context, from, end string) (string, bool, error) {
	for e, err := range s.rangeIter(ctx, from, end, true) {
		if err != nil {
			return "", false, err
		}
		return string(e.Key), true, nil
	}
	return "", false, nil
}

// CountPartition counts a partition's keys with a count-only range,
// without reading them.
func (s *Store) CountPartition(ctx context.Context, partition []byte) (int64, error) {
	start := time.Now()
	n, err := s.countPartition(ctx, partition)
	observe("count_partition", start, err)
	return n, err
}

func (s *Store) countPartition(ctx context.Context, partition []byte) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	if err := kv.ValidatePartition(partition); err != nil {
		return 0, err
	}
	var resp *clientv3.GetResponse
	err := s.read(ctx, func(c context.Context) error {
		var err error
		resp, err = s.cli.Get(c, s.RawPrefix(partition), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	})
	if err != nil {
		return 0, readErr(ctx, fmt.Sprintf("count partition %q", partition), err)
	}
	s.saw(resp.Header)
	return resp.Count, nil
}
