package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/fsck"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"

	"google.golang.org/protobuf/proto"
)

// installation is a repository written through the Graveler service into
// an embedded etcd and a file:// blob store.
type installation struct {
	endpoints string
	store     *etcdkv.Store
	blobs     committed.BlobStore
	ns        graveler.StorageNamespace
	head      *graveler.CommitRecord
}

func newInstallation(t *testing.T) *installation {
	t.Helper()
	ctx := context.Background()
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	g := gravelertest.New(t, store, gravelertest.Options{Blobs: blobs})
	ns := graveler.StorageNamespace("file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "sales")))
	if _, err := g.CreateRepository(ctx, "sales", ns, "main"); err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		for i := range 20 {
			k := fmt.Sprintf("k-%d-%03d", c, i)
			if err := g.Set(ctx, "sales", "main", graveler.Key(k), graveler.Value{Identity: []byte(k), Data: []byte("d")}, graveler.SetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := g.Commit(ctx, "sales", "main", graveler.CommitParams{Committer: "t", Message: fmt.Sprint(c)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.CreateTag(ctx, "sales", "v1", "main"); err != nil {
		t.Fatal(err)
	}
	head, err := g.GetCommit(ctx, "sales", "main")
	if err != nil {
		t.Fatal(err)
	}
	return &installation{endpoints: strings.Join(srv.Endpoints(), ","), store: store, blobs: blobs, ns: ns, head: head}
}

// fsckRun runs the command with args (after --etcd-endpoints) and no
// environment.
func fsckRun(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExitHealthy(t *testing.T) {
	in := newInstallation(t)
	code, out, errOut := fsckRun(t, nil, "--etcd-endpoints", in.endpoints)
	if code != exitHealthy || !strings.Contains(out, "HEALTHY") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// The same through the environment, with a JSON report and --full.
	code, out, errOut = fsckRun(t, map[string]string{"GRAVELER_ETCD_ENDPOINTS": in.endpoints, "GRAVELER_FULL": "true"}, "-o", "json")
	var rep fsck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitHealthy {
		t.Fatalf("exit %d, json %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if !rep.Healthy || !rep.Full || rep.Stats.Commits != 4 || rep.Stats.Ranges == 0 || rep.Stats.RangeBytes == 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestExitProblems(t *testing.T) {
	in := newInstallation(t)
	ctx := context.Background()
	rs, err := committed.ReadMetaRange(ctx, in.blobs, in.ns, in.head.MetaRangeID)
	if err != nil || len(rs) == 0 {
		t.Fatalf("ranges %v, %v", rs, err)
	}
	// The blob holding the first range: its pack (as gravelerd stores
	// ranges), or the range on its own.
	gone := committed.RangeObjectName(rs[0].ID)
	if rs[0].Loc.Packed() {
		gone = committed.PackObjectName(rs[0].Loc.Pack)
	}
	if err := in.blobs.Delete(ctx, in.ns, gone); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := fsckRun(t, nil, "--etcd-endpoints", in.endpoints, "-o", "json")
	var rep fsck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitProblems {
		t.Fatalf("exit %d, json %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if rep.Count(fsck.KindRangeMissing) != 1 || !strings.Contains(errOut, "gravelerfsck: exit 1: 1 problems found") {
		t.Fatalf("report findings %+v\nstderr:\n%s", rep.Findings, errOut)
	}
	code, out, _ = fsckRun(t, nil, "--etcd-endpoints", in.endpoints)
	if code != exitProblems || !strings.Contains(out, "range_missing") || !strings.Contains(out, "what to do:") {
		t.Fatalf("exit %d, text report:\n%s", code, out)
	}
}

func TestExitRepairThenHealthy(t *testing.T) {
	in := newInstallation(t)
	tok := "sales." + ref.NewID()
	data, err := proto.Marshal(&stagingpb.Entry{FormatVersion: 1, Identity: []byte("i")})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.store.Set(context.Background(), keys.StagingPartition(tok), keys.Entry([]byte("late")), data); err != nil {
		t.Fatal(err)
	}
	args := []string{"--etcd-endpoints", in.endpoints, "--orphan-grace=-1s"}
	queued := func(wantCode int) int {
		t.Helper()
		code, out, errOut := fsckRun(t, nil, append(args, "-o", "json")...)
		var rep fsck.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != wantCode {
			t.Fatalf("exit %d (want %d), json %v\nstdout:\n%s\nstderr:\n%s", code, wantCode, err, out, errOut)
		}
		return rep.Stats.QueuedPartitions
	}
	before := queued(exitProblems)
	code, out, _ := fsckRun(t, nil, append(args, "--repair")...)
	if code != exitProblems || !strings.Contains(out, "staging_orphaned") || !strings.Contains(out, "queued") || !strings.Contains(out, "REPAIRS (1)") {
		t.Fatalf("exit %d, report:\n%s", code, out)
	}
	if after := queued(exitHealthy); after != before+1 {
		t.Fatalf("queued partitions %d before the repair, %d after", before, after)
	}
}

func TestExitUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--etcd-endpoints", "http://127.0.0.1:1", "-o", "yaml"},
		{"--etcd-endpoints", "http://127.0.0.1:1", "--no-such-flag"},
		{"--etcd-endpoints", "http://127.0.0.1:1", "--parallel", "0"},
		{"--etcd-endpoints", "http://127.0.0.1:1", "extra"},
	} {
		if code, _, errOut := fsckRun(t, nil, args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, _, errOut := fsckRun(t, map[string]string{"GRAVELER_ETCD_ENDPOINTS": "http://127.0.0.1:1", "GRAVELER_FULL": "maybe"}); code != exitUsage || !strings.Contains(errOut, "GRAVELER_FULL") {
		t.Errorf("bad variable: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := fsckRun(t, nil, "--version"); code != exitHealthy || !strings.Contains(out, "gravelerfsck") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
}

func TestExitUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	code, out, errOut := fsckRun(t, nil, "--etcd-endpoints", addr, "--etcd-dial-timeout", "300ms", "-o", "json")
	if code != exitIncomplete || !strings.Contains(errOut, "cannot reach etcd at "+addr) || !strings.Contains(errOut, "connect timeout") {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	var rep fsck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.Incomplete || rep.Healthy {
		t.Fatalf("report %+v (%v):\n%s", rep, err, out)
	}
}

// TestBadDurationSaysWhatADurationIs: a duration without a unit, as a flag
// or in its variable, exits 2 saying what a duration looks like instead of
// the flag package's "parse error".
func TestBadDurationSaysWhatADurationIs(t *testing.T) {
	const want = "not a duration (use a unit: 500ms, 5s, 2m)"
	if code, _, errOut := fsckRun(t, nil, "--etcd-endpoints", "http://127.0.0.1:1", "--timeout", "10"); code != exitUsage || !strings.Contains(errOut, `invalid value "10" for flag -timeout: `+want) {
		t.Errorf("--timeout 10: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := fsckRun(t, map[string]string{"GRAVELER_ETCD_ENDPOINTS": "http://127.0.0.1:1", "GRAVELER_ORPHAN_GRACE": "1d"}); code != exitUsage || !strings.Contains(errOut, `GRAVELER_ORPHAN_GRACE="1d": `+want) {
		t.Errorf("GRAVELER_ORPHAN_GRACE=1d: exit %d, stderr %q", code, errOut)
	}
}

// TestEachBadFlagNamedWithItsValue: flags checked alike are refused one by
// one, each naming its flag and the value it got.
func TestEachBadFlagNamedWithItsValue(t *testing.T) {
	code, _, errOut := fsckRun(t, nil, "--etcd-endpoints", "http://127.0.0.1:1", "--parallel", "0", "--max-tombstones", "-1", "--etcd-dial-timeout", "0s", "--timeout", "-1s")
	if code != exitUsage {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"gravelerfsck: --parallel=0 must be above 0", "gravelerfsck: --max-tombstones=-1 must be above 0",
		"gravelerfsck: --etcd-dial-timeout=0s must be above 0", "gravelerfsck: --timeout=-1s must not be negative"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not say %q", errOut, want)
		}
	}
	for _, notAtFault := range []string{"--max-sealed-tokens", "--etcd-request-timeout", "--deleting-timeout"} {
		if strings.Contains(errOut, notAtFault) {
			t.Errorf("stderr %q names %s, which is not at fault", errOut, notAtFault)
		}
	}
}
