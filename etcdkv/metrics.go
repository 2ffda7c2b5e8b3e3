package etcdkv

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"graveler/kv"
)

var (
	opsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_kv_ops_total",
		Help: "kv operations on etcd by operation and outcome.",
	}, []string{"op", "outcome"})
	opDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "graveler_kv_op_duration_seconds",
		Help:    "Duration of kv operations on etcd.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"op"})
	settleAttempts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_kv_settle_total",
		Help: "Writes whose outcome was unknown and had to be settled by re-sending.",
	})
	ambiguousWrites = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_kv_ambiguous_total",
		Help: "Writes returned to the caller as ambiguous (settling failed).",
	})
	scanRestarts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_kv_scan_restarts_total",
		Help: "Scans resumed at the current revision because their pinned revision was compacted.",
	})
	attemptTimeouts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_kv_attempt_timeouts_total",
		Help: "etcd request attempts abandoned after the per-attempt request timeout (reads are sent again, writes settled).",
	})
	readResends = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_kv_read_resends_total",
		Help: "Reads sent again after the member serving them failed or was between leaders (a broken connection, no leader).",
	})
	fenceMoves = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_kv_fence_moves_total",
		Help: "Moves of the store's write fence after a write attempt's answer was lost, so that the attempt cannot apply later.",
	})
	membersOut = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_kv_etcd_members_out",
		Help: "etcd endpoints taken out of the client's rotation because the member stopped answering (put back once it answers).",
	})
	keysDropped = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_kv_partition_keys_dropped_total",
		Help: "Keys deleted by partition drops.",
	})
)

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, kv.ErrNotFound):
		return "not_found"
	case errors.Is(err, kv.ErrPredicateFailed):
		return "predicate_failed"
	case errors.Is(err, kv.ErrAmbiguous):
		return "ambiguous"
	case errors.Is(err, kv.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

func observe(op string, start time.Time, err error) {
	opsTotal.WithLabelValues(op, outcome(err)).Inc()
	opDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}
