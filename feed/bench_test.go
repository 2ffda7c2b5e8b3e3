package feed_test

import (
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"graveler/feed"
	"graveler/graveler"
	"graveler/graveler/ref/refpb"
	"graveler/keys"
)

type arrival struct {
	id graveler.CommitID
	at time.Time
}

// BenchmarkWatchLatency measures, for each commit the service
// acknowledged, the time until a feed subscriber gets its BRANCH_MOVED,
// beside the time until a raw etcd watch of the branch's key in the same
// run gets the write (0 when it came before the acknowledgement, as it
// mostly does: a commit's last steps follow the branch's move), and the
// feed's delay after that raw watch (the cost of the hub: decoding,
// reading the commit, fanning out). Reported: feed-p50-ms, feed-p99-ms,
// raw-p50-ms, raw-p99-ms, behind-raw-p50-ms, behind-raw-p99-ms.
func BenchmarkWatchLatency(b *testing.B) {
	e := newEnv(b, feed.Config{Logger: zap.NewNop()})
	const repo = graveler.RepositoryID("bench")
	e.createRepo(repo)
	rec, err := e.svc.GetRepository(e.ctx, repo)
	if err != nil {
		b.Fatal(err)
	}
	key := e.store.RawKey(keys.RepositoryPartition(string(repo), string(rec.UniqueID)), keys.Branch("main"))
	sub := e.subscribe(feed.Request{Repository: repo})
	fromFeed, fromRaw := make(chan arrival, 1024), make(chan arrival, 1024)
	go func() {
		for {
			m, err := sub.Next(e.ctx)
			if err != nil {
				return
			}
			now := time.Now()
			for _, ev := range m.Events {
				if ev.Type == feed.BranchMoved {
					fromFeed <- arrival{ev.CommitID, now}
				}
			}
		}
	}()
	raw := e.srv.Client.Watch(e.ctx, key, clientv3.WithRev(e.rev()+1))
	go func() {
		for resp := range raw {
			now := time.Now()
			for _, ev := range resp.Events {
				var br refpb.Branch
				if proto.Unmarshal(ev.Kv.Value, &br) == nil && br.GetChange() == int32(graveler.ChangeCommit) {
					fromRaw <- arrival{graveler.CommitID(br.GetCommitId()), now}
				}
			}
		}
	}()
	wait := func(ch chan arrival, id graveler.CommitID) time.Time {
		for a := range ch {
			if a.id == id {
				return a.at
			}
		}
		return time.Time{}
	}
	feedLat := make([]time.Duration, 0, b.N)
	rawLat := make([]time.Duration, 0, b.N)
	behind := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := e.commit(repo, "main", "k", string(rune('a'+i%26))+time.Now().String())
		ack := time.Now()
		f, r := wait(fromFeed, id), wait(fromRaw, id)
		feedLat = append(feedLat, max(0, f.Sub(ack)))
		rawLat = append(rawLat, max(0, r.Sub(ack)))
		behind = append(behind, f.Sub(r))
	}
	b.StopTimer()
	report := func(name string, lat []time.Duration) {
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
		b.ReportMetric(q(0.50), name+"-p50-ms")
		b.ReportMetric(q(0.99), name+"-p99-ms")
	}
	report("feed", feedLat)
	report("raw", rawLat)
	report("behind-raw", behind)
}
