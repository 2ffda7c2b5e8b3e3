package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/status"
)

// recorder collects one worker's samples; workers never share one, so the
// hot path takes no lock. merge combines them after the run.
type recorder struct {
	lat  map[string][]time.Duration
	errs map[string]map[string]int
}

func newRecorder() *recorder {
	return &recorder{lat: map[string][]time.Duration{}, errs: map[string]map[string]int{}}
}

func (r *recorder) observe(op string, d time.Duration, err error) {
	if err != nil {
		m := r.errs[op]
		if m == nil {
			m = map[string]int{}
			r.errs[op] = m
		}
		m[errorClass(err)]++
		return
	}
	r.lat[op] = append(r.lat[op], d)
}

// errorClass names an error by its gRPC code, or "other".
func errorClass(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String()
	}
	var c interface{ GRPCStatus() *status.Status }
	if errors.As(err, &c) {
		return c.GRPCStatus().Code().String()
	}
	return "other"
}

// OpStats summarises one operation's successful calls.
type OpStats struct {
	Op      string
	Count   int
	Errors  map[string]int
	Elapsed time.Duration
	P50     time.Duration
	P90     time.Duration
	P99     time.Duration
	Max     time.Duration
}

// Throughput is successful operations per second.
func (s OpStats) Throughput() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Count) / s.Elapsed.Seconds()
}

// ErrorCount sums every error class.
func (s OpStats) ErrorCount() int {
	n := 0
	for _, c := range s.Errors {
		n += c
	}
	return n
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

// summarize merges recorders into per-operation statistics, sorted by op.
func summarize(elapsed time.Duration, recs ...*recorder) []OpStats {
	lat := map[string][]time.Duration{}
	errs := map[string]map[string]int{}
	for _, r := range recs {
		for op, d := range r.lat {
			lat[op] = append(lat[op], d...)
		}
		for op, m := range r.errs {
			if errs[op] == nil {
				errs[op] = map[string]int{}
			}
			for k, v := range m {
				errs[op][k] += v
			}
		}
	}
	ops := map[string]bool{}
	for op := range lat {
		ops[op] = true
	}
	for op := range errs {
		ops[op] = true
	}
	var out []OpStats
	for op := range ops {
		d := lat[op]
		slices.Sort(d)
		s := OpStats{Op: op, Count: len(d), Errors: errs[op], Elapsed: elapsed}
		if len(d) > 0 {
			s.P50, s.P90, s.P99, s.Max = percentile(d, 50), percentile(d, 90), percentile(d, 99), d[len(d)-1]
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return out
}

var printMu sync.Mutex

func printStats(w io.Writer, title string, stats []OpStats) {
	printMu.Lock()
	defer printMu.Unlock()
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tok\terrors\tops/s\tp50\tp90\tp99\tmax\t")
	for _, s := range stats {
		errs := fmt.Sprint(s.ErrorCount())
		if n := s.ErrorCount(); n > 0 {
			errs = fmt.Sprint(s.Errors)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", s.Op, s.Count, errs, s.Throughput(),
			round(s.P50), round(s.P90), round(s.P99), round(s.Max))
	}
	tw.Flush()
}

// allFailed describes each operation of stats that was called and never
// succeeded, with its errors by gRPC code.
func allFailed(stats []OpStats) []string {
	var out []string
	for _, s := range stats {
		if s.Count == 0 && s.ErrorCount() > 0 {
			out = append(out, fmt.Sprintf("every %s call failed %v", s.Op, s.Errors))
		}
	}
	return out
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func find(stats []OpStats, op string) (OpStats, bool) {
	for _, s := range stats {
		if s.Op == op {
			return s, true
		}
	}
	return OpStats{}, false
}
