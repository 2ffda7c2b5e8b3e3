package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeSide records the phases it runs and reports perPhase(phase) calls of
// 1ms per phase second, so throughputs, and their ratios, are known.
func fakeSide(name, op string, order *[]string, perPhase func(phase int) int) *side {
	return &side{title: name, op: op, run: func(_ context.Context, phase int, d time.Duration) ([]*recorder, time.Duration) {
		*order = append(*order, name+string(rune('0'+phase+1)))
		r := newRecorder()
		for range perPhase(phase) {
			r.observe(op, time.Millisecond, nil)
		}
		return []*recorder{r}, time.Second
	}}
}

// TestCompareAlternatesAndQuotesMedian: after a warm-up of each side the
// phases alternate in pairs of swapped order, and RATIO quotes the median
// of the pairs' ratios (not the ratio of the totals), every pair's ratio,
// the load average and the connections of each side.
func TestCompareAlternatesAndQuotesMedian(t *testing.T) {
	var out bytes.Buffer
	var order []string
	b := &bench{out: &out, duration: 4 * time.Second, pairs: 4, warmup: time.Second, etcdConns: 1}
	// Graveler's phases do 900, 50, 100, 100 calls; raw's always 100:
	// pair ratios 9, 0.5, 1, 1, median 1; the totals would say 2.875.
	g := fakeSide("g", "graveler.put", &order, func(p int) int { return []int{100, 900, 50, 100, 100}[p+1] })
	r := fakeSide("r", "etcd.put", &order, func(int) int { return 100 })
	b.compare(context.Background(), "x", 16, g, r)
	if want := []string{"g0", "r0", "g1", "r1", "r2", "g2", "g3", "r3", "r4", "g4"}; !slices.Equal(order, want) {
		t.Fatalf("phases ran %v, want %v", order, want)
	}
	s := out.String()
	re := regexp.MustCompile(`RATIO x clients=16 graveler/etcd throughput=1\.000 \(\d+ vs \d+ ops/s\) p50=1\.00x p99=1\.00x median of 4 pairs \[9\.000 0\.500 1\.000 1\.000\]; load1 \S+ -> \S+; etcd connections gravelerd=1 raw=1`)
	if !re.MatchString(s) {
		t.Fatalf("no RATIO line with the median of the pairs:\n%s", s)
	}
	if !strings.Contains(s, "g, 4s in 4 phases") || !strings.Contains(s, "r, 4s in 4 phases") {
		t.Fatalf("missing the merged statistics of each side:\n%s", s)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}, {nil, 0}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestCompareCountsSystemCalls: the SYSCALLS line quotes each side's read
// and write system calls per call. The fake graveler side makes three
// writes and one read per call, the raw side one write and two reads.
func TestCompareCountsSystemCalls(t *testing.T) {
	if _, _, ok := processIO(); !ok {
		t.Skip("this system does not report system calls per process (/proc/self/io)")
	}
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1)
	side := func(op string, writes, reads int) *side {
		return &side{title: op, op: op, run: func(_ context.Context, _ int, _ time.Duration) ([]*recorder, time.Duration) {
			r := newRecorder()
			for range 1000 {
				for range writes {
					f.Write(buf)
				}
				for range reads {
					f.Read(buf)
				}
				r.observe(op, time.Millisecond, nil)
			}
			return []*recorder{r}, time.Second
		}}
	}
	var out bytes.Buffer
	b := &bench{out: &out, duration: 2 * time.Second, pairs: 2, etcdConns: 1}
	b.compare(context.Background(), "x", 1, side("graveler.put", 3, 1), side("etcd.put", 1, 2))
	m := regexp.MustCompile(`SYSCALLS x clients=1 process read/write system calls per call: graveler (\S+)/(\S+), etcd (\S+)/(\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no SYSCALLS line:\n%s", out.String())
	}
	for i, want := range []float64{1, 3, 2, 1} {
		got, err := strconv.ParseFloat(m[i+1], 64)
		// A few calls of the runtime and of the counting itself may
		// land in a phase: 0.05 per call is 100 of them.
		if err != nil || got < want || got > want+0.05 {
			t.Errorf("figure %d of %q is %s, want %v", i+1, m[0], m[i+1], want)
		}
	}
}

// TestCompareChargesServerProcesses: with --etcd-pid and --server-pid the
// PROCESS_CPU line gives each side's CPU per call in those processes. The
// test names its own process as both, and its fake graveler side burns
// twice the CPU per call of its raw side, so etcd's ratio is about 2.
func TestCompareChargesServerProcesses(t *testing.T) {
	if _, ok := pidsCPU([]int{os.Getpid()}); !ok {
		t.Skip("this system does not report a process's CPU in /proc/<pid>/stat")
	}
	burn := func(d time.Duration) {
		c0, _ := processCPU()
		for {
			if c, _ := processCPU(); c-c0 >= d {
				return
			}
		}
	}
	side := func(op string, per time.Duration) *side {
		return &side{title: op, op: op, run: func(_ context.Context, _ int, _ time.Duration) ([]*recorder, time.Duration) {
			r := newRecorder()
			for range 50 {
				burn(per)
				r.observe(op, time.Millisecond, nil)
			}
			return []*recorder{r}, time.Second
		}}
	}
	var out bytes.Buffer
	me := []int{os.Getpid()}
	b := &bench{out: &out, duration: 2 * time.Second, pairs: 2, etcdConns: 1, etcdPIDs: me, serverPIDs: me}
	b.compare(context.Background(), "x", 1, side("graveler.get", 4*time.Millisecond), side("etcd.get", 2*time.Millisecond))
	m := regexp.MustCompile(`PROCESS_CPU x clients=1 cpu per call: etcd \[\d+\] graveler (\S+), raw (\S+), graveler/etcd=(\S+)x median of 2 pairs \[\S+ \S+\]; gravelerd \[\d+\] (\S+); load tool graveler (\S+), raw (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no PROCESS_CPU line:\n%s", out.String())
	}
	// /proc/<pid>/stat counts in 10 ms ticks, and each phase burns 100 or
	// 200 ms: a tick either way is 5-10%.
	for i, want := range []time.Duration{4 * time.Millisecond, 2 * time.Millisecond, 0, 4 * time.Millisecond, 4 * time.Millisecond, 2 * time.Millisecond} {
		if want == 0 {
			continue
		}
		got, err := time.ParseDuration(m[i+1])
		if err != nil || got < want*8/10 || got > want*13/10 {
			t.Errorf("figure %d of %q is %s, want about %v", i+1, m[0], m[i+1], want)
		}
	}
	if r, err := strconv.ParseFloat(m[3], 64); err != nil || r < 1.6 || r > 2.5 {
		t.Errorf("etcd ratio %s, want about 2", m[3])
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name may hold spaces and parentheses; fields count from
	// the last ')'. utime 250 and stime 50 ticks are 3 s.
	line := "4242 (a) (b c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 1000 10 18446744073709551615\n"
	if d, err := parseStatCPU([]byte(line)); err != nil || d != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s", d, err)
	}
	for _, bad := range []string{"", "4242 (x) S 1 2", "4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 -5 50 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
}

// TestProcessCPUWithoutTicks: sides that used no measurable etcd CPU
// (under one 10 ms tick of /proc) give no etcd ratio, printed as n/a, not
// as 0.
func TestProcessCPUWithoutTicks(t *testing.T) {
	if _, ok := pidsCPU([]int{os.Getpid()}); !ok {
		t.Skip("this system does not report a process's CPU in /proc/<pid>/stat")
	}
	side := func(op string) *side {
		return &side{title: op, op: op, run: func(_ context.Context, _ int, _ time.Duration) ([]*recorder, time.Duration) {
			r := newRecorder()
			r.observe(op, time.Millisecond, nil)
			return []*recorder{r}, time.Second
		}}
	}
	var out bytes.Buffer
	b := &bench{out: &out, duration: 2 * time.Second, pairs: 2, etcdConns: 1, etcdPIDs: []int{os.Getpid()}}
	b.compare(context.Background(), "x", 1, side("graveler.get"), side("etcd.get"))
	line := regexp.MustCompile(`(?m)^PROCESS_CPU .*$`).FindString(out.String())
	if line == "" {
		t.Fatalf("no PROCESS_CPU line:\n%s", out.String())
	}
	// A tick may land in a phase now and then; a ratio then is a real one.
	if strings.Contains(line, "graveler/etcd=0.00x") || (strings.Contains(line, "median of 0 pairs") && !strings.Contains(line, "graveler/etcd=n/a")) {
		t.Errorf("no ratio printed as a figure: %s", line)
	}
}
