package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/keys"
)

// BenchmarkCapacity measures what each kind of record costs in etcd's
// database and what a committed entry costs in the blob store, and prints
// the table of docs/capacity.md:
//
//	go test ./etcdkv -run '^$' -bench BenchmarkCapacity -benchtime 1x
//
// GRAVELER_CAPACITY_N sets how many records of each kind are written
// (default 2000; repositories: a quarter of it). Each row writes them
// through the service on a fresh embedded etcd, then compacts and
// defragments, so the database size (Status.DbSize, what the quota
// measures) grows by the records' live bytes only; "history" is the
// exception: it defragments without compacting, so it is what one
// revision of an overwritten staged entry costs until compaction.
func BenchmarkCapacity(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("GRAVELER_CAPACITY_N")); err == nil && v > 0 {
		n = v
	}
	for range b.N {
		rows := measureCapacity(b, n)
		fmt.Printf("\n| record | logical key+value bytes | bytes in etcd's database | per 2 GiB | per 8 GiB |\n| --- | ---: | ---: | ---: | ---: |\n")
		for _, r := range rows {
			if r.blob {
				continue
			}
			logical := "-" // history: no record of its own
			if r.logical > 0 {
				logical = fmt.Sprintf("%.0f", r.logical)
			}
			fmt.Printf("| %s | %s | %.0f | %s | %s |\n", r.what, logical, r.db, count(2<<30, r.db), count(8<<30, r.db))
		}
		fmt.Printf("\n| committed entry | bytes per entry in packs (ranges and inner nodes) | in roots |\n| --- | ---: | ---: |\n")
		for _, r := range rows {
			if r.blob {
				fmt.Printf("| %s | %.1f | %.2f |\n", r.what, r.logical, r.db)
			}
		}
		fmt.Println()
	}
}

func count(quota, per float64) string {
	v := quota / per
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1f M", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0f k", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

type capacityRow struct {
	what        string
	logical, db float64 // blob rows: bytes per entry in ranges, in metaranges
	blob        bool
}

// entryShape is a staged or committed entry: key, identity and data sizes.
type entryShape struct{ key, identity, data int }

func (s entryShape) String() string {
	return fmt.Sprintf("key %d B, identity %d B, data %d B", s.key, s.identity, s.data)
}

func (s entryShape) entry(i int) (graveler.Key, graveler.Value) {
	k := fmt.Sprintf("tables/events/date=2026-11-%02d/part-%08d", i%28+1, i)
	k += strings.Repeat("x", max(0, s.key-len(k)))
	return graveler.Key(k[:s.key]), graveler.Value{
		Identity: []byte(fmt.Sprintf("%0*d", s.identity, i)),
		Data:     []byte(fmt.Sprintf("%0*d", s.data, i)),
	}
}

var capacityShapes = []entryShape{{64, 32, 100}, {128, 32, 1000}}

// capacityWorld is one fresh etcd with a service on it.
type capacityWorld struct {
	b     *testing.B
	srv   *etcdkvtest.Server
	store *etcdkv.Store
	g     *graveler.Graveler
	blobs committed.BlobStore
	ctx   context.Context
}

func newCapacityWorld(b *testing.B) *capacityWorld {
	srv := etcdkvtest.NewServer(b)
	store := etcdkvtest.NewStoreOn(b, srv, etcdkv.Config{})
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	b.Cleanup(func() { blobs.Close() })
	return &capacityWorld{b: b, srv: srv, store: store, g: gravelertest.New(b, store, gravelertest.Options{Blobs: blobs}), blobs: blobs, ctx: context.Background()}
}

// size compacts (unless keepHistory), defragments and returns DbSize.
func (w *capacityWorld) size(keepHistory bool) int64 {
	ep := w.srv.Endpoints()[0]
	st, err := w.srv.Client.Status(w.ctx, ep)
	if err != nil {
		w.b.Fatal(err)
	}
	if !keepHistory {
		// A compaction keeps the tombstones written at its own revision:
		// one more write moves it past the last delete.
		put, err := w.srv.Client.Put(w.ctx, "/capacity-scratch", "")
		if err != nil {
			w.b.Fatal(err)
		}
		st.Header.Revision = put.Header.Revision
		if _, err := w.srv.Client.Compact(w.ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			w.b.Fatal(err)
		}
	}
	if _, err := w.srv.Client.Defragment(w.ctx, ep); err != nil {
		w.b.Fatal(err)
	}
	if st, err = w.srv.Client.Status(w.ctx, ep); err != nil {
		w.b.Fatal(err)
	}
	return st.DbSize
}

// logical sums len(key)+len(value) of the raw etcd keys under prefix.
func (w *capacityWorld) logical(prefix string) int64 {
	resp, err := w.srv.Client.Get(w.ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		w.b.Fatal(err)
	}
	var sum int64
	for _, kv := range resp.Kvs {
		sum += int64(len(kv.Key) + len(kv.Value))
	}
	return sum
}

// deletePrefix removes what a row must not count (work items, consumed
// staging partitions), as the cleaner would.
func (w *capacityWorld) deletePrefix(prefix string) {
	if _, err := w.srv.Client.Delete(w.ctx, prefix, clientv3.WithPrefix()); err != nil {
		w.b.Fatal(err)
	}
}

func (w *capacityWorld) check(err error) {
	if err != nil {
		w.b.Helper()
		w.b.Fatal(err)
	}
}

func (w *capacityWorld) repoPrefix(repo graveler.RepositoryID) string {
	rec, err := w.g.GetRepository(w.ctx, repo)
	w.check(err)
	return w.store.RawPrefix(keys.RepositoryPartition(string(repo), string(rec.UniqueID)))
}

func measureCapacity(b *testing.B, n int) []capacityRow {
	root := "/graveler/"
	stagingPrefix := root + "staging:"
	deletedPrefix := root + etcdkv.PartitionElement(keys.Deleted()) + "/"
	var rows []capacityRow
	per := func(what string, logical, grew int64, k int) {
		rows = append(rows, capacityRow{what: what, logical: float64(logical) / float64(k), db: float64(grew) / float64(k)})
	}

	{ // Repositories: record, namespace claim, initial commit, default branch.
		w := newCapacityWorld(b)
		k := max(1, n/4)
		base := w.size(false)
		for i := range k {
			_, err := w.g.CreateRepository(w.ctx, graveler.RepositoryID(fmt.Sprintf("repository-%06d", i)), gravelertest.Namespace(), "main")
			w.check(err)
		}
		w.deletePrefix(stagingPrefix) // none hold keys; etcd holds no empty partitions
		per("repository (record, namespace claim, initial commit, main branch)", w.logical(root), w.size(false)-base, k)
	}
	{ // Branches, tags, commits in one repository.
		w := newCapacityWorld(b)
		_, err := w.g.CreateRepository(w.ctx, "capacity", gravelertest.Namespace(), "main")
		w.check(err)
		prefix := w.repoPrefix("capacity")
		head, err := w.g.GetBranch(w.ctx, "capacity", "main")
		w.check(err)

		base, logicalBase := w.size(false), w.logical(prefix+keys.BranchesPrefix)
		for i := range n {
			_, err := w.g.CreateBranch(w.ctx, "capacity", graveler.BranchID(fmt.Sprintf("feature-%06d", i)), graveler.Ref(head.CommitID))
			w.check(err)
		}
		per("branch", w.logical(prefix+keys.BranchesPrefix)-logicalBase, w.size(false)-base, n)

		base, logicalBase = w.size(false), w.logical(prefix+keys.TagsPrefix)
		for i := range n {
			_, err := w.g.CreateTag(w.ctx, "capacity", graveler.TagID(fmt.Sprintf("v1.%06d", i)), graveler.Ref(head.CommitID))
			w.check(err)
		}
		per("tag", w.logical(prefix+keys.TagsPrefix)-logicalBase, w.size(false)-base, n)

		base, logicalBase = w.size(false), w.logical(prefix+keys.CommitsPrefix)
		for i := range n {
			_, err := w.g.Commit(w.ctx, "capacity", "main", graveler.CommitParams{
				Committer: "etl-pipeline@example.com", Message: fmt.Sprintf("load batch %d", i),
				Metadata: graveler.Metadata{"job": "nightly-load", "run": strconv.Itoa(i)}, AllowEmpty: true})
			w.check(err)
		}
		// Each commit also queued its consumed (empty) token for the
		// cleaner: those work items are a row of their own.
		withItems, items := w.size(false), w.logical(deletedPrefix)
		w.deletePrefix(deletedPrefix)
		without := w.size(false)
		per("commit (message 14 B, committer 24 B, 2 metadata pairs)", w.logical(prefix+keys.CommitsPrefix)-logicalBase, without-base, n)
		per("queued cleaner work item (a consumed staging token)", items, withItems-without, n)
	}
	for _, s := range capacityShapes { // Staged entries, history, committed entries.
		w := newCapacityWorld(b)
		ns := gravelertest.Namespace()
		_, err := w.g.CreateRepository(w.ctx, "capacity", ns, "main")
		w.check(err)
		base, logicalBase := w.size(false), w.logical(stagingPrefix)
		for i := range n {
			k, v := s.entry(i)
			w.check(w.g.Set(w.ctx, "capacity", "main", k, v, graveler.SetOptions{}))
		}
		per("staged entry ("+s.String()+")", w.logical(stagingPrefix)-logicalBase, w.size(false)-base, n)

		base = w.size(true)
		k0, v := s.entry(0)
		for i := range n {
			v.Identity = []byte(fmt.Sprintf("%0*d", s.identity, i+1))
			w.check(w.g.Set(w.ctx, "capacity", "main", k0, v, graveler.SetOptions{}))
		}
		per("history: one overwrite of that staged entry, until compaction", 0, w.size(true)-base, n)

		_, err = w.g.Commit(w.ctx, "capacity", "main", graveler.CommitParams{Committer: "c", Message: "m"})
		w.check(err)
		var ranges, metaranges int64
		for _, p := range []struct {
			prefix string
			into   *int64
		}{{committed.RangesPrefix, &ranges}, {committed.PacksPrefix, &ranges}, {committed.MetaRangesPrefix, &metaranges}} {
			w.check(w.blobs.List(w.ctx, ns, p.prefix, func(page []committed.BlobInfo) error {
				for _, o := range page {
					*p.into += o.Size
				}
				return nil
			}))
		}
		rows = append(rows, capacityRow{what: s.String(), logical: float64(ranges) / float64(n), db: float64(metaranges) / float64(n), blob: true})
	}
	return rows
}
