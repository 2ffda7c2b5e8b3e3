package cleaner

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	_ "graveler/buildinfo/metric" // graveler_build_info on the daemon's /metrics
)

const (
	kindStaging    = "staging"
	kindRepository = "repository"
	kindBranch     = "branch"
	reasonDeleted  = "deleted"
	reasonOrphan   = "orphan"
)

var (
	runsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_cleaner_runs_total",
		Help: "Cleaner passes by outcome (ok, incomplete: stopped at --max-keys or --timeout, error: failed steps or an aborted pass).",
	}, []string{"outcome"})
	runDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "graveler_cleaner_run_duration_seconds",
		Help:    "Duration of cleaner passes.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 18),
	})
	partitionsReclaimed = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_cleaner_partitions_reclaimed_total",
		Help: "Partitions dropped by the cleaner, by kind (staging, repository) and reason (deleted: from the work list, orphan: found by the sweep).",
	}, []string{"kind", "reason"})
	keysReclaimed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_keys_reclaimed_total",
		Help: "Keys deleted by the cleaner's partition drops.",
	})
	entriesRemovedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_work_items_removed_total",
		Help: "graveler_deleted entries removed after their partitions were dropped.",
	})
	retiredTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_repositories_retired_total",
		Help: "Repository records (deleting, or initial past the creation timeout) retired by the cleaner.",
	})
	skippedRecords = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_cleaner_skipped_records_total",
		Help: "Repository and branch records the cleaner could not decode and passed over, by kind (repository, branch); each counts once per pass. Whatever such a record may reference is kept.",
	}, []string{"kind"})
	errorsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_errors_total",
		Help: "Cleaner steps that failed and are retried by the next pass.",
	})
	backlog = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_cleaner_backlog",
		Help: "graveler_deleted entries found at the start of the last pass.",
	})
	leader = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_cleaner_leader",
		Help: "1 while this cleaner process leads and runs passes.",
	})
)

func observeRun(s *Summary, err error) {
	runDuration.Observe(s.Duration.Seconds())
	switch {
	case err != nil || s.Errors > 0:
		runsTotal.WithLabelValues("error").Inc()
		if err != nil {
			errorsTotal.Inc()
		}
	case s.Incomplete:
		runsTotal.WithLabelValues("incomplete").Inc()
	default:
		runsTotal.WithLabelValues("ok").Inc()
	}
}
