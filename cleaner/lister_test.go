package cleaner_test

import (
	"context"
	"slices"
	"testing"

	"graveler/cleaner"
	"graveler/keys"
	"graveler/kv"
)

// TestListers: both listers name each partition once, whatever
// characters sort around '/', and only under the prefix asked for.
func TestListers(t *testing.T) {
	parts := [][]byte{
		keys.StagingPartition("a"), keys.StagingPartition("a-b"), keys.StagingPartition("a.b"),
		keys.StagingPartition("a0"), keys.StagingPartition("ab"), keys.StagingPartition("b"),
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
	// A stray key right under a prefix is no partition.
	if _, err := cli.Put(t.Context(), etcdStore.Prefix()+"/staging/", "x"); err != nil {
		t.Fatal(err)
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
