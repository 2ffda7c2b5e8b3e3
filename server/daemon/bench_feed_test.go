package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/etcdkv/embedded"
	"graveler/server/daemon"
	"graveler/server/daemon/daemontest"
)

// benchDaemon is gravelerd on an embedded etcd of its own, in this
// process, with a repository.
type benchDaemon struct {
	srv  *daemontest.Server
	etcd *clientv3.Client
	cl   *client.Client
	repo string
	seq  int // of the entries committed, each a change
}

func startBenchDaemon(b *testing.B, repo string) *benchDaemon {
	b.Helper()
	etcd, err := embedded.Start(embedded.Config{Dir: b.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { etcd.Close() })
	srv := daemontest.Start(b, func(c *daemon.Config) {
		c.Etcd.Endpoints = etcd.Endpoints()
		c.Logger = zap.NewNop()
	})
	raw, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	d := &benchDaemon{srv: srv, etcd: raw, cl: benchDial(b, srv.Addr), repo: repo}
	if _, err := d.cl.CreateRepository(context.Background(), &pb.CreateRepositoryRequest{RepositoryId: repo}); err != nil {
		b.Fatal(err)
	}
	return d
}

func benchDial(b testing.TB, addr string) *client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

func (d *benchDaemon) revision(b *testing.B) int64 {
	r, err := d.etcd.Get(context.Background(), "/", clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	return r.Header.Revision
}

// commit stages one entry on main and commits it.
func (d *benchDaemon) commit(b *testing.B) *pb.CommitResponse {
	ctx := context.Background()
	d.seq++
	i := d.seq
	key := []byte(fmt.Sprintf("k/%d", i%64))
	if _, err := d.cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: client.Branch(d.repo, "main"),
		Entry: &pb.Entry{Key: key, Value: &pb.Value{Identity: []byte(strconv.Itoa(i)), Data: key}}}); err != nil {
		b.Fatal(err)
	}
	r, err := d.cl.Commit(ctx, &pb.CommitRequest{Branch: client.Branch(d.repo, "main"), Options: &pb.CommitOptions{Message: strconv.Itoa(i)}})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func liveHeap() (alloc uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// The watchers of the feed benchmarks run in a child process (this test
// binary again, told what to do by watchersEnv), so that this process,
// the daemon and its embedded etcd, holds only the server's side of the
// streams.
const (
	watchersEnv   = "GRAVELER_BENCH_WATCHERS"
	watchersReady = "watchers: ready"
	watchersMsgs  = "watchers: messages "
	watchersMove  = "watchers: move "
)

type watcherSpec struct {
	addr, repo string
	n, conns   int
	start      int64
	interval   time.Duration // 0: the server's default
	moves      bool          // print every BRANCH_MOVED with its arrival time
	// expectMoves is how many moves the benchmark will read (not sent to
	// the child: it sizes the buffer that keeps the child from waiting).
	expectMoves int
}

// watcherProcess is the child process's end in the benchmark.
type watcherProcess struct {
	cmd   *exec.Cmd
	stdin io.Closer
	ready chan struct{}
	// moves receives the commit ids and arrival times of the moves, if
	// asked for; msgs the count of messages once the watchers ended.
	moves chan move
	msgs  chan int
}

type move struct {
	commit string
	at     time.Time
}

// startWatchers runs bench (the calling benchmark's name) in a child
// process as watchers and returns once each has received a message.
func startWatchers(b *testing.B, bench string, w watcherSpec) *watcherProcess {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^"+bench+"$", "-test.benchtime=1x")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%d,%d,%d,%t", watchersEnv, w.addr, w.repo, w.n, w.conns, w.start, w.interval, w.moves))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &watcherProcess{cmd: cmd, stdin: stdin, ready: make(chan struct{}), moves: make(chan move, w.expectMoves), msgs: make(chan int, 1)}
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			l := lines.Text()
			if rest, ok := strings.CutPrefix(l, watchersMove); ok {
				id, ns, _ := strings.Cut(rest, " ")
				t, _ := strconv.ParseInt(ns, 10, 64)
				p.moves <- move{id, time.Unix(0, t)}
			} else if rest, ok := strings.CutPrefix(l, watchersMsgs); ok {
				n, _ := strconv.Atoi(rest)
				p.msgs <- n
			} else if l == watchersReady {
				close(p.ready)
			}
		}
		close(p.msgs)
	}()
	select {
	case <-p.ready:
	case <-time.After(2 * time.Minute):
		b.Fatal("the watchers process did not get ready")
	}
	return p
}

// stop ends the watchers and returns how many messages they received.
func (p *watcherProcess) stop(b *testing.B) int {
	p.stdin.Close()
	n, ok := <-p.msgs
	if err := p.cmd.Wait(); err != nil || !ok {
		b.Fatalf("watchers process: %v", err)
	}
	return n
}

// watchersChild is the child process: it opens the watches, says when each
// has received its first message, and ends them when its input closes.
func watchersChild(b *testing.B, spec string) {
	f := strings.Split(spec, ",")
	var w watcherSpec
	var interval int64
	w.addr, w.repo = f[0], f[1]
	w.n, _ = strconv.Atoi(f[2])
	w.conns, _ = strconv.Atoi(f[3])
	w.start, _ = strconv.ParseInt(f[4], 10, 64)
	interval, _ = strconv.ParseInt(f[5], 10, 64)
	w.moves = f[6] == "true"
	clients := make([]*client.Client, w.conns)
	for i := range clients {
		clients[i] = benchDial(b, w.addr)
	}
	out := bufio.NewWriter(os.Stdout)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var msgs, first int
	var wg sync.WaitGroup
	for i := range w.n {
		seen := false
		opts := client.WatchOptions{Repository: w.repo, StartRevision: w.start, ProgressInterval: time.Duration(interval)}
		wg.Go(func() {
			_ = clients[i%w.conns].Watch(ctx, opts, func(m *client.WatchMessage) error {
				now := time.Now().UnixNano()
				mu.Lock()
				defer mu.Unlock()
				msgs++
				if w.moves {
					for _, e := range m.GetEvents() {
						if e.GetType() == pb.RefEvent_TYPE_BRANCH_MOVED {
							fmt.Fprintf(out, "%s%s %d\n", watchersMove, e.GetCommitId(), now)
						}
					}
					_ = out.Flush()
				}
				if !seen {
					seen = true
					if first++; first == w.n {
						fmt.Fprintln(out, watchersReady)
						_ = out.Flush()
					}
				}
				return nil
			})
		})
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	wg.Wait()
	fmt.Fprintf(out, "%s%d\n", watchersMsgs, msgs)
	_ = out.Flush()
}

const (
	idleWatchers  = 1000
	idleInterval  = 2 * time.Second // the watchers' bookmark interval
	idleIntervals = 5               // one op: a window of this many intervals
)

// BenchmarkWatchIdle measures what 1,000 idle WatchRefs streams on one
// repository cost gravelerd (the watchers run in a child process). Each op
// is one window of idleIntervals bookmark intervals; the baseline is the
// same window before the watchers connect (heap, goroutines, CPU) and
// after they left (CPU). conns=1 opens every stream on one connection,
// conns=1000 one connection per watcher (separate consumers). Reported:
// heap-B/watcher (live heap after GC, minus the baseline's),
// goroutines/watcher, cpu-us/watcher/interval (process CPU, minus the
// baseline's, per watcher and bookmark interval), heap-ratio and cpu-ratio
// (with the watchers / baseline), and bookmarks/watcher/interval (what
// the watchers received, over about the measured window). Run:
//
//	go test -run '^$' -bench BenchmarkWatchIdle -benchtime 1x ./server/daemon/
func BenchmarkWatchIdle(b *testing.B) {
	if spec := os.Getenv(watchersEnv); spec != "" {
		watchersChild(b, spec)
		return
	}
	d := startBenchDaemon(b, "idle")
	for _, conns := range []int{1, idleWatchers} {
		b.Run(fmt.Sprintf("watchers=%d/conns=%d", idleWatchers, conns), func(b *testing.B) {
			d.commit(b)
			window := idleIntervals * idleInterval
			idle := func() (cpu time.Duration) {
				for range b.N {
					c := cpuTime()
					time.Sleep(window)
					cpu += cpuTime() - c
				}
				return cpu
			}
			heap0, g0 := liveHeap()
			cpu0 := idle()

			start := d.revision(b)
			d.commit(b)
			// Ready: every watcher got the commit, so its subscription is
			// live.
			p := startWatchers(b, "BenchmarkWatchIdle", watcherSpec{addr: d.srv.Addr, repo: d.repo, n: idleWatchers, conns: conns,
				start: start, interval: idleInterval})
			heap1, g1 := liveHeap()
			b.ResetTimer()
			cpu1 := idle()
			b.StopTimer()
			msgs := p.stop(b)
			// The baseline again, once the watchers are gone: the machine's
			// drift in between averages out.
			cpu0 = (cpu0 + idle()) / 2

			n := float64(idleWatchers)
			intervals := float64(b.N * idleIntervals)
			b.ReportMetric((float64(heap1)-float64(heap0))/n, "heap-B/watcher")
			b.ReportMetric(float64(g1-g0)/n, "goroutines/watcher")
			b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/n/intervals, "cpu-us/watcher/interval")
			b.ReportMetric(float64(heap1)/float64(heap0), "heap-ratio")
			b.ReportMetric(float64(cpu1)/float64(cpu0), "cpu-ratio")
			// Each watcher's first message was the commit; the rest came
			// while idle (and while this process measured its heap).
			b.ReportMetric(float64(msgs-idleWatchers)/n/intervals, "bookmarks/watcher/interval")
		})
	}
}

// BenchmarkWatchBusy measures one writer committing in a loop on a
// repository that 100 WatchRefs streams follow (through the client
// helper, in a child process, 10 connections), against the same writer
// with no watcher, in the same run: b.N/2 commits alone, b.N watched, b.N/2
// alone again (the two halves average out drift). An op is a staged write
// and a commit. The watchers share the machine's cores with the daemon.
// Reported: commits/s alone and watched, throughput-ratio (watched /
// alone), cpu-ratio (this process's CPU, the daemon's and etcd's, per
// commit watched / alone), and for every watcher and commit the delay of
// its BRANCH_MOVED after the commit's response (delivery-p50-ms,
// delivery-p99-ms; 0 when it came first, as it can: the commit's last
// steps follow the move) and after its request was sent
// (from-send-p50-ms, from-send-p99-ms). Run:
//
//	go test -run '^$' -bench BenchmarkWatchBusy -benchtime 400x ./server/daemon/
func BenchmarkWatchBusy(b *testing.B) {
	if spec := os.Getenv(watchersEnv); spec != "" {
		watchersChild(b, spec)
		return
	}
	const watchers = 100
	d := startBenchDaemon(b, "busy")
	half := max(1, b.N/2)
	alone := func(n int) (time.Duration, time.Duration) {
		t, c := time.Now(), cpuTime()
		for range n {
			d.commit(b)
		}
		return time.Since(t), cpuTime() - c
	}
	d.commit(b) // warm the caches
	b.ResetTimer()
	aloneTime, aloneCPU := alone(half)
	b.StopTimer()

	start := d.revision(b)
	d.commit(b) // every watcher gets it: all are live when the clock starts
	p := startWatchers(b, "BenchmarkWatchBusy", watcherSpec{addr: d.srv.Addr, repo: d.repo, n: watchers, conns: 10, start: start, moves: true, expectMoves: watchers * (b.N + 1)})
	type sent struct{ send, ack time.Time }
	commits := map[string]sent{}
	b.StartTimer()
	t, c := time.Now(), cpuTime()
	for range b.N {
		s := time.Now()
		r := d.commit(b)
		commits[r.GetCommit().GetId()] = sent{s, time.Now()}
	}
	watchedTime, watchedCPU := time.Since(t), cpuTime()-c
	b.StopTimer()
	arrivals := map[string][]time.Time{}
	for range watchers * (b.N + 1) {
		select {
		case m := <-p.moves:
			arrivals[m.commit] = append(arrivals[m.commit], m.at)
		case <-time.After(2 * time.Minute):
			b.Fatal("the watchers did not receive every commit")
		}
	}
	p.stop(b)
	var fromAck, fromSend []time.Duration
	for id, s := range commits {
		if len(arrivals[id]) != watchers {
			b.Fatalf("commit %s reached %d watchers of %d", id, len(arrivals[id]), watchers)
		}
		for _, at := range arrivals[id] {
			fromAck = append(fromAck, max(0, at.Sub(s.ack)))
			fromSend = append(fromSend, at.Sub(s.send))
		}
	}

	b.StartTimer()
	t2, c2 := alone(half)
	aloneTime, aloneCPU = aloneTime+t2, aloneCPU+c2
	b.StopTimer()

	aloneRate := float64(2*half) / aloneTime.Seconds()
	watchedRate := float64(b.N) / watchedTime.Seconds()
	b.ReportMetric(aloneRate, "commits/s-alone")
	b.ReportMetric(watchedRate, "commits/s-watched")
	b.ReportMetric(watchedRate/aloneRate, "throughput-ratio")
	b.ReportMetric((float64(watchedCPU)/float64(b.N))/(float64(aloneCPU)/float64(2*half)), "cpu-ratio")
	q := func(lat []time.Duration, p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond)
	}
	slices.Sort(fromAck)
	slices.Sort(fromSend)
	b.ReportMetric(q(fromAck, 0.50), "delivery-p50-ms")
	b.ReportMetric(q(fromAck, 0.99), "delivery-p99-ms")
	b.ReportMetric(q(fromSend, 0.50), "from-send-p50-ms")
	b.ReportMetric(q(fromSend, 0.99), "from-send-p99-ms")
}
