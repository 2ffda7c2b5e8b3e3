package fsck_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/fsck"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/graveler/ref/refpb"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
)

// tinyRanges cuts ranges of about 8 keys, so a small repository spans many
// ranges and consecutive commits share most of them. Each object is stored
// on its own, so that a test can damage or remove one object alone;
// TestFsckPackedTrees checks trees in packs.
var tinyRanges = committed.Config{MinRangeSize: 1, MaxRangeSize: 4 << 10, BoundaryMask: 7, BlockSize: 128, Unpacked: true}

// world is a real installation in a test: an embedded etcd, a file blob
// store, and the Graveler service writing to both.
type world struct {
	t     testing.TB
	ctx   context.Context
	srv   *etcdkvtest.Server
	store *etcdkv.Store
	blobs committed.BlobStore
	g     *graveler.Graveler
	// root is the storage namespace under which each repository has its
	// own.
	root string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	return newWorldOn(t, blobs, "file://"+filepath.ToSlash(t.TempDir()), tinyRanges)
}

// newWorldOn builds a world on blobs, with namespaces under root and
// ranges cut by cfg.
func newWorldOn(t testing.TB, blobs committed.BlobStore, root string, cfg committed.Config) *world {
	t.Helper()
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	w := &world{t: t, ctx: context.Background(), srv: srv, store: store, blobs: blobs, root: root}
	w.g = gravelertest.New(t, store, gravelertest.Options{Blobs: blobs, Committed: cfg})
	return w
}

// ns is the storage namespace of repository repo.
func (w *world) ns(repo string) graveler.StorageNamespace {
	return graveler.StorageNamespace(w.root + "/" + repo)
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) put(repo, branch string, from, to int, tag string) {
	w.t.Helper()
	for i := from; i < to; i++ {
		k := fmt.Sprintf("tables/t%02d/part-%05d", i%7, i)
		w.must(w.g.Set(w.ctx, graveler.RepositoryID(repo), graveler.BranchID(branch), graveler.Key(k),
			graveler.Value{Identity: []byte(fmt.Sprintf("%s-%d", tag, i)), Data: []byte("s3://bucket/" + k)}, graveler.SetOptions{}))
	}
}

func (w *world) commit(repo, branch, msg string) graveler.CommitID {
	w.t.Helper()
	id, err := w.g.Commit(w.ctx, graveler.RepositoryID(repo), graveler.BranchID(branch), graveler.CommitParams{Committer: "test", Message: msg})
	w.must(err)
	return id
}

// build makes a repository the way clients do: commits on two branches,
// a merge, a tag, and staged changes (with deletes) on top.
func (w *world) build(repo string) {
	w.t.Helper()
	r := graveler.RepositoryID(repo)
	_, err := w.g.CreateRepository(w.ctx, r, w.ns(repo), "main")
	w.must(err)
	w.put(repo, "main", 0, 120, "a")
	w.commit(repo, "main", "first")
	_, err = w.g.CreateBranch(w.ctx, r, "dev", "main")
	w.must(err)
	w.put(repo, "dev", 100, 160, "b")
	w.commit(repo, "dev", "on dev")
	w.put(repo, "main", 10, 20, "c")
	w.commit(repo, "main", "second")
	_, _, err = w.g.Merge(w.ctx, r, "main", "dev", graveler.MergeParams{CommitParams: graveler.CommitParams{Committer: "test", Message: "merge dev"}, NoFastForward: true})
	w.must(err)
	_, err = w.g.CreateTag(w.ctx, r, "v1", "main")
	w.must(err)
	w.put(repo, "main", 200, 205, "d")
	w.must(w.g.Delete(w.ctx, r, "main", graveler.Key("tables/t00/part-00000")))
	w.must(w.g.Delete(w.ctx, r, "main", graveler.Key("tables/t01/part-00001")))
}

// installation builds two repositories and a deleted third.
func (w *world) installation() {
	w.t.Helper()
	w.build("sales")
	w.build("gone")
	w.must(w.g.DeleteRepository(w.ctx, "gone"))
	_, err := w.g.CreateRepository(w.ctx, "logs", w.ns("logs"), "main")
	w.must(err)
	w.put("logs", "main", 0, 30, "l")
	w.commit("logs", "main", "logs")
}

// check runs fsck and fails the test if it could not complete.
func (w *world) check(cfg fsck.Config) *fsck.Report {
	w.t.Helper()
	rep, err := fsck.New(w.store, w.blobs, cfg).Run(w.ctx)
	if err != nil {
		w.t.Fatalf("fsck: %v\n%s", err, text(rep))
	}
	return rep
}

func text(rep *fsck.Report) string {
	if rep == nil {
		return "(no report)"
	}
	var b strings.Builder
	_ = rep.WriteText(&b)
	return b.String()
}

func (w *world) repository(repo string) *graveler.RepositoryRecord {
	w.t.Helper()
	rec, err := w.g.GetRepository(w.ctx, graveler.RepositoryID(repo))
	w.must(err)
	return rec
}

func (w *world) partition(repo string) []byte {
	rec := w.repository(repo)
	return keys.RepositoryPartition(repo, string(rec.UniqueID))
}

func (w *world) head(repo, branch string) *graveler.CommitRecord {
	w.t.Helper()
	c, err := w.g.GetCommit(w.ctx, graveler.RepositoryID(repo), graveler.Ref(branch))
	w.must(err)
	return c
}

// ranges returns the ranges of a commit's metarange.
func (w *world) ranges(repo string, c *graveler.CommitRecord) []committed.RangeDescriptor {
	w.t.Helper()
	rs, err := committed.ReadMetaRange(w.ctx, w.blobs, w.ns(repo), c.MetaRangeID)
	w.must(err)
	if len(rs) < 3 {
		w.t.Fatalf("commit %s has %d ranges; the fixture wants several", c.CommitID, len(rs))
	}
	return rs
}

// fakeCommitID is a well-formed commit id that no commit has.
func fakeCommitID(seed string) graveler.CommitID {
	sum := sha256.Sum256([]byte(seed))
	return graveler.CommitID(hex.EncodeToString(sum[:]))
}

func (w *world) setBranch(repo, branch string, b *refpb.Branch) {
	w.t.Helper()
	b.FormatVersion = ref.BranchFormatVersion
	data, err := proto.Marshal(b)
	w.must(err)
	w.must(w.store.Set(w.ctx, w.partition(repo), keys.Branch(branch), data))
}

func (w *world) setRepositoryRecord(name string, state refpb.RepositoryState, created time.Time) {
	w.t.Helper()
	data, err := proto.Marshal(&refpb.Repository{
		FormatVersion:    ref.RepositoryFormatVersion,
		StorageNamespace: string(w.ns(name)),
		DefaultBranchId:  "main",
		CreationDate:     timestamppb.New(created),
		State:            state,
		UniqueId:         ref.NewID(),
	})
	w.must(err)
	w.must(w.store.Set(w.ctx, keys.Graveler(), keys.Repository(name), data))
}

// stageRaw writes a staged entry straight into a token's partition, as a
// writer holding a stale branch does after the token was consumed.
func (w *world) stageRaw(token, key string) {
	w.t.Helper()
	data, err := proto.Marshal(&stagingpb.Entry{FormatVersion: 1, Identity: []byte("late"), Data: []byte("x")})
	w.must(err)
	w.must(w.store.Set(w.ctx, keys.StagingPartition(token), keys.Entry([]byte(key)), data))
}

func findings(rep *fsck.Report, k fsck.Kind) []fsck.Finding {
	var out []fsck.Finding
	for _, f := range rep.Findings {
		if f.Kind == k {
			out = append(out, f)
		}
	}
	return out
}

// only checks that the report's findings are exactly n of kind k.
func only(t testing.TB, rep *fsck.Report, k fsck.Kind, n int) []fsck.Finding {
	t.Helper()
	got := findings(rep, k)
	if len(got) != n || len(rep.Findings) != n || rep.Healthy {
		t.Fatalf("want exactly %d %s findings and nothing else (healthy false), got:\n%s", n, k, text(rep))
	}
	for _, f := range got {
		if f.Severity != fsck.Kinds[k].Severity || f.Action == "" || f.Resource == "" || f.Detail == "" {
			t.Fatalf("finding %+v lacks its severity, resource, detail or action", f)
		}
	}
	return got
}
