package cleaner_test

import (
	"context"
	"slices"
	"testing"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/keys"
	"graveler/kv"
)

// The etcd store is the lister and counter the cleaner uses on etcd.
var (
	_ cleaner.PartitionLister  = (*etcdkv.Store)(nil)
	_ cleaner.PartitionCounter = (*etcdkv.Store)(nil)
)

// TestListers: both listers name each partition once, whatever
// characters sort around '/', and only under the prefix asked for.
func TestListers(t *testing.T) {
	parts := [][]byte{
		keys.StagingPartition("a"), keys.StagingPartition("a-b"), keys.StagingPartition("a.b"),
		keys.StagingPartition("a0"), keys.StagingPartition("ab"), keys.StagingPartition("b"),
		[]byte("staging/a/b"), []byte("staging/a/b/c"),
		keys.RepositoryPartition("repo", "x1"), keys.RepositoryPartition("repo-two", "y2"),
		keys.Graveler(), keys.Deleted(),
	}
	fill := func(s kv.Store) {
		for _, p := range parts {
			for i := range 3 {
				if err := s.Set(context.Background(), p, keys.Entry([]byte{'k', byte('0' + i)}), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	etcdStore, cli, etcdLister := newEtcd(t)
	fill(etcdStore)
	// Stray keys no partition can hold are stepped over: one right under
	// the root, one whose element decodes to an invalid name.
	for _, k := range []string{"/staging:stray", "/staging:/k", "/staging:a::b/k"} {
		if _, err := cli.Put(t.Context(), etcdStore.Prefix()+k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	mem := kv.NewMemoryStore()
	fill(mem)
	for name, l := range map[string]cleaner.PartitionLister{"etcd": etcdLister, "memory": cleaner.NewMemoryLister(mem)} {
		for _, prefix := range [][]byte{keys.StagingPartitionPrefix(), keys.RepositoryPartitionPrefix()} {
			var want, got []string
			for _, p := range parts {
				if string(p[:len(prefix)]) == string(prefix) {
					want = append(want, string(p))
				}
			}
			slices.Sort(want)
			for p, err := range l.ListPartitions(t.Context(), prefix) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(p))
			}
			// etcd orders by full key, so "a-b/" comes before "a/": the
			// order of partitions is not promised, only each exactly once.
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s %s: listed %v, want %v", name, prefix, got, want)
			}
		}
	}
	n, err := etcdLister.CountPartition(t.Context(), keys.StagingPartition("a"))
	if err != nil || n != 3 {
		t.Fatalf("CountPartition = %d, %v; want 3", n, err)
	}
}
