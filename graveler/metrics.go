package graveler

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	commitDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "graveler_commit_duration_seconds",
		Help:    "Duration of Commit calls, by outcome (ok, no_changes, error).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"outcome"})
	commitRebases = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_commit_rebases_total",
		Help: "Commits that found the branch moved by a concurrent commit and re-applied their remaining sealed tokens onto the new head (seed 004's overlap rule).",
	})
	commitContention = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_commit_contended_updates_total",
		Help: "Commit branch updates that lost the ref manager's whole round of compare-and-swap retries to other updates of the branch and started another round.",
	})
	writeRetries = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_write_retries_total",
		Help: "Staged writes repeated into a new staging token because a commit sealed the one they wrote to.",
	})
	writesUnknown = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_write_outcome_unknown_total",
		Help: "Staged writes answered OUTCOME_UNKNOWN because their staging token was retired and dropped while they were in flight, so whether they applied before the retirement could not be told.",
	})
	readRetries = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_read_retries_total",
		Help: "Branch reads repeated because the branch's head or staging tokens changed while they read.",
	})
	resetRetries = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_reset_retries_total",
		Help: "Rounds a reset of a key or prefix repeated because a commit changed the branch's head or staging tokens while it ran.",
	})
	resetOverrideTokens = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_reset_override_tokens_total",
		Help: "Override tokens published by resets of a key or prefix that found a commit in flight (each also seals the staging token).",
	})
	diffRetries = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_diff_uncommitted_retries_total",
		Help: "Chunks of an uncommitted diff read again because a staging token they read from left the branch meanwhile.",
	})
	commitReadRate = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_commit_read_rate",
		Help: "Entries a second the commit pacer lets commits read their staged entries at now (0: unpaced, as when nobody writes).",
	})
	commitPaceCuts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_commit_pace_cuts_total",
		Help: "Times the commit pacer halved the commits' read rate because the writers' latency rose above its baseline.",
	})
	commitPaceBaseline = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_commit_pace_baseline_seconds",
		Help: "The staged writes' 90th percentile latency with no commit reading, which the commit pacer holds them near.",
	})
	tokenQueueFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_token_queue_failures_total",
		Help: "Consumed staging tokens that could not be queued for the cleaner; the cleaner's orphan sweep reclaims them.",
	})
)

// The series of commitDuration, bound on first use rather than looked up
// by label on every commit; bound lazily so that /metrics lists only the
// outcomes that happened, as before.
var (
	commitOK        = sync.OnceValue(func() prometheus.Observer { return commitDuration.WithLabelValues("ok") })
	commitNoChanges = sync.OnceValue(func() prometheus.Observer { return commitDuration.WithLabelValues("no_changes") })
	commitError     = sync.OnceValue(func() prometheus.Observer { return commitDuration.WithLabelValues("error") })
)

func observeCommit(start time.Time, err error) {
	o := commitOK
	switch {
	case err == nil:
	case errorsIsNoChanges(err):
		o = commitNoChanges
	default:
		o = commitError
	}
	o().Observe(time.Since(start).Seconds())
}

func errorsIsNoChanges(err error) bool { return errors.Is(err, ErrNoChanges) }
