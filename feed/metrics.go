package feed

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	subscribersGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_feed_subscribers",
		Help: "Open change feed subscriptions (WatchRefs streams).",
	})
	eventsDelivered = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_feed_events_delivered_total",
		Help: "Ref events handed to subscribers, initial state included.",
	})
	catchUps = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_feed_catchups_total",
		Help: "Subscriptions that started before the hub's memory and read etcd's history with a watch of their own.",
	})
	slowCloses = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_feed_slow_consumer_closes_total",
		Help: "Subscriptions closed because they fell behind the hub's memory (RESOURCE_EXHAUSTED).",
	})
	watchRestarts = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_feed_watch_restarts_total",
		Help: "Restarts of the hub's etcd watch: reason error (the watch broke and resumed with no gap) or compacted (the hub fell behind etcd's compaction and closed its subscribers).",
	}, []string{"reason"})
	hubRevision = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_feed_revision",
		Help: "The etcd revision up to which the hub has seen every ref change.",
	})
)
