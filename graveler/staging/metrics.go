package staging

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	fencedWrites = promauto.NewCounter(prometheus.CounterOpts{
		Name: "staging_fenced_writes_total",
		Help: "Staged writes sent with their fence reads (SetAndRead), alone or sharing a request.",
	})
	fencedBatches = promauto.NewCounter(prometheus.CounterOpts{
		Name: "staging_fenced_requests_total",
		Help: "kv requests that carried fenced staged writes; staging_fenced_writes_total over this is the writes per request.",
	})
	fencedBatchWrites = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "staging_fenced_request_writes",
		Help:    "Distinct keys written by one fenced kv request.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
)
