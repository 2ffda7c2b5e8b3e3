package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// workload is the shape of every generated key and value.
type workload struct {
	KeySize   int
	ValueSize int
}

// key returns a key unique to (worker, seq), padded to KeySize so both the
// graveler and the raw-etcd runs move the same bytes.
func (w workload) key(prefix string, worker, seq int) []byte {
	k := fmt.Appendf(nil, "%s%04d/%012d", prefix, worker, seq)
	for len(k) < w.KeySize {
		k = append(k, 'x')
	}
	return k
}

// identity is a 16-byte content identity; unique per write so every write
// is a change.
func identity(worker, seq int) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(worker))
	binary.BigEndian.PutUint64(b[8:], uint64(seq))
	return b
}

func (w workload) data() []byte {
	b := make([]byte, w.ValueSize)
	_, _ = rand.Read(b)
	return b
}

// runWorkers runs op on n workers until d passes or ctx ends, and returns
// each worker's samples and the wall time. op records its own samples, so
// one worker may time several operations.
func runWorkers(ctx context.Context, n int, d time.Duration, op func(ctx context.Context, rec *recorder, worker, seq int) error) ([]*recorder, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	recs := make([]*recorder, n)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range n {
		recs[w] = newRecorder()
		wg.Go(func() {
			for seq := 0; !over(ctx); seq++ {
				if err := op(ctx, recs[w], w, seq); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return recs, time.Since(start)
}

// timed runs f and records it under op unless the run's deadline cut it
// short (a call interrupted by the end of the run is not a sample).
func timed(ctx context.Context, rec *recorder, op string, f func() error) error {
	start := time.Now()
	err := f()
	if err != nil && over(ctx) {
		return context.DeadlineExceeded
	}
	rec.observe(op, time.Since(start), err)
	return nil
}

// over reports whether the run has ended. It checks the deadline itself:
// gRPC fails a call whose deadline has passed before the context's own
// timer has marked it done, and such failures are not samples.
func over(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// side is one half of a comparison: a workload that run drives for one
// phase of d (phase counts from 0; -1 is the warm-up), and the operation
// of its samples that is compared.
type side struct {
	title string
	op    string
	run   func(ctx context.Context, phase int, d time.Duration) ([]*recorder, time.Duration)
}

// compare is how every "graveler/etcd" RATIO line is measured: graveler
// (g) and raw etcd (raw) run in turns on the same machine, never together.
// After an unmeasured warm-up of each, --duration per side is split into
// --pairs pairs of phases, and the order alternates from pair to pair
// (g raw, raw g, g raw, ...), so that load which rises or falls during
// the run weighs on both sides alike. Each pair gives a ratio, and the
// RATIO line quotes their median, with every pair's ratio and the 1-minute
// load average at the start and the end of the cell: a wide spread of
// pairs, or a load that moved, says the machine was not quiet. Either side
// may be nil (baseline-only, or no --etcd): its phases are skipped.
func (b *bench) compare(ctx context.Context, what string, clients int, g, raw *side) {
	pairs := max(b.pairs, 1)
	phase := b.duration / time.Duration(pairs)
	warm := min(b.warmup, phase)
	loadStart := loadAvg()
	sides := []*side{g, raw}
	if warm > 0 {
		for _, s := range sides {
			if s != nil {
				s.run(ctx, -1, warm)
			}
		}
	}
	var recs [2][]*recorder
	var elapsed, cpu [2]time.Duration
	var sysR, sysW [2]int64
	var etcdCPU, serverCPU [2]time.Duration
	var thr, p50, p99, cpuRatio, etcdRatio []float64
	cpuOK, ioOK := true, true
	etcdOK, serverOK := len(b.etcdPIDs) > 0, len(b.serverPIDs) > 0
	for i := range pairs {
		var got [2][]OpStats
		var phaseCPU, phaseEtcd [2]time.Duration
		for k := range 2 {
			j := k
			if i%2 == 1 {
				j = 1 - k
			}
			if sides[j] == nil {
				continue
			}
			e0, eok0 := pidsCPU(b.etcdPIDs)
			s0, sok0 := pidsCPU(b.serverPIDs)
			r0, w0, iok0 := processIO()
			c0, ok0 := processCPU()
			r, el := sides[j].run(ctx, i, phase)
			c1, ok1 := processCPU()
			r1, w1, iok1 := processIO()
			e1, eok1 := pidsCPU(b.etcdPIDs)
			s1, sok1 := pidsCPU(b.serverPIDs)
			etcdOK = etcdOK && eok0 && eok1
			serverOK = serverOK && sok0 && sok1
			etcdCPU[j] += e1 - e0
			serverCPU[j] += s1 - s0
			phaseEtcd[j] = e1 - e0
			cpuOK = cpuOK && ok0 && ok1
			ioOK = ioOK && iok0 && iok1
			sysR[j] += r1 - r0
			sysW[j] += w1 - w0
			recs[j] = append(recs[j], r...)
			elapsed[j] += el
			cpu[j] += c1 - c0
			got[j] = summarize(el, r...)
			phaseCPU[j] = c1 - c0
		}
		if g == nil || raw == nil {
			continue
		}
		gs, ok1 := find(got[0], g.op)
		rs, ok2 := find(got[1], raw.op)
		if !ok1 || !ok2 || rs.Throughput() == 0 || rs.P50 == 0 || rs.P99 == 0 {
			continue
		}
		thr = append(thr, gs.Throughput()/rs.Throughput())
		p50 = append(p50, float64(gs.P50)/float64(rs.P50))
		p99 = append(p99, float64(gs.P99)/float64(rs.P99))
		if gs.Count > 0 && rs.Count > 0 && phaseCPU[1] > 0 {
			cpuRatio = append(cpuRatio, (float64(phaseCPU[0])/float64(gs.Count))/(float64(phaseCPU[1])/float64(rs.Count)))
		}
		if gs.Count > 0 && rs.Count > 0 && phaseEtcd[1] > 0 {
			etcdRatio = append(etcdRatio, (float64(phaseEtcd[0])/float64(gs.Count))/(float64(phaseEtcd[1])/float64(rs.Count)))
		}
	}
	var all [2][]OpStats
	for j, s := range sides {
		if s != nil {
			all[j] = summarize(elapsed[j], recs[j]...)
			b.report(fmt.Sprintf("%s, %s in %d phases", s.title, elapsed[j].Round(time.Millisecond), pairs), all[j])
		}
	}
	if len(thr) == 0 {
		return
	}
	gs, _ := find(all[0], g.op)
	rs, _ := find(all[1], raw.op)
	printMu.Lock()
	defer printMu.Unlock()
	fmt.Fprintf(b.out, "RATIO %s clients=%d graveler/etcd throughput=%.3f (%.0f vs %.0f ops/s) p50=%.2fx p99=%.2fx median of %d pairs %s; load1 %s -> %s; etcd connections gravelerd=%d raw=%d\n",
		what, clients, median(thr), gs.Throughput(), rs.Throughput(), median(p50), median(p99),
		len(thr), fmtPairs(thr), loadStart, loadAvg(), gravelerdEtcdConns, b.etcdConns)
	if cpuOK && gs.Count > 0 && rs.Count > 0 && len(cpuRatio) > 0 {
		// CPU time per call varies far less than throughput when other
		// work shares the machine. It is this process's: with --embedded,
		// the load tool, gravelerd and etcd together, so each side's
		// figure is the whole cost of its calls on this machine.
		fmt.Fprintf(b.out, "CPU %s clients=%d process cpu per call: graveler %s, etcd %s; graveler/etcd=%.2fx median of %d pairs %s\n",
			what, clients, (cpu[0] / time.Duration(gs.Count)).Round(100*time.Nanosecond), (cpu[1] / time.Duration(rs.Count)).Round(100*time.Nanosecond),
			median(cpuRatio), len(cpuRatio), fmtPairs(cpuRatio))
	}
	if (etcdOK || serverOK) && gs.Count > 0 && rs.Count > 0 {
		// Against separate processes, the CPU line is the load tool's
		// alone, and this one gives the servers'. etcd's CPU per call is
		// what bounds a deployment whose gravelerd replicas scale out: one
		// etcd cluster serves at most its cores divided by it.
		line := fmt.Sprintf("PROCESS_CPU %s clients=%d cpu per call:", what, clients)
		if etcdOK {
			// /proc counts in 10 ms ticks: a raw phase that used less than
			// one gives no ratio, which must not print as 0.
			ratio := "n/a"
			if len(etcdRatio) > 0 {
				ratio = fmt.Sprintf("%.2fx", median(etcdRatio))
			}
			line += fmt.Sprintf(" etcd %v graveler %s, raw %s, graveler/etcd=%s median of %d pairs %s;",
				b.etcdPIDs, perCall(etcdCPU[0], gs.Count), perCall(etcdCPU[1], rs.Count), ratio, len(etcdRatio), fmtPairs(etcdRatio))
		}
		if serverOK {
			line += fmt.Sprintf(" gravelerd %v %s;", b.serverPIDs, perCall(serverCPU[0], gs.Count))
		}
		if cpuOK {
			line += fmt.Sprintf(" load tool graveler %s, raw %s", perCall(cpu[0], gs.Count), perCall(cpu[1], rs.Count))
		}
		fmt.Fprintln(b.out, strings.TrimSuffix(line, ";"))
	}
	if ioOK && gs.Count > 0 && rs.Count > 0 {
		// Like the CPU line, the whole process's: with --embedded, the
		// load tool's, gravelerd's and etcd's system calls together.
		fmt.Fprintf(b.out, "SYSCALLS %s clients=%d process read/write system calls per call: graveler %.2f/%.2f, etcd %.2f/%.2f\n",
			what, clients, float64(sysR[0])/float64(gs.Count), float64(sysW[0])/float64(gs.Count),
			float64(sysR[1])/float64(rs.Count), float64(sysW[1])/float64(rs.Count))
	}
}

// perCall is d spread over n calls, rounded for printing.
func perCall(d time.Duration, n int) time.Duration {
	return (d / time.Duration(n)).Round(100 * time.Nanosecond)
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	xs = slices.Sorted(slices.Values(xs))
	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// fmtPairs lists ratios in the order measured.
func fmtPairs(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.3f", x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// loadAvg is the 1-minute load average (/proc/loadavg), or "n/a" where
// the system does not publish it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "n/a"
	}
	return f[0]
}
