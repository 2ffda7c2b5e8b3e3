// Package metric exports the graveler_build_info gauge on Prometheus's
// default registry as soon as it is imported: a series that is always 1
// and whose labels name the build (package buildinfo), so that dashboards
// tell which build each process runs and spot a half-finished rollout.
//
// Every package whose process serves /metrics imports it (server for
// gravelerd, cleaner for the cleaner daemon); it lives apart from
// buildinfo so that a binary without metrics (gravelerctl) does not link
// Prometheus. It has no API and nothing to close.
//
// Concurrency: importing it from any number of packages registers the
// gauge once (package initialization); the gauge is Prometheus's, safe
// for concurrent scraping.
//
// Errors: none. Another graveler_build_info on the default registry
// panics at start, as promauto does on any duplicate.
package metric

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"graveler/buildinfo"
)

var buildInfo = promauto.NewGauge(prometheus.GaugeOpts{
	Name:        "graveler_build_info",
	Help:        "Always 1; its labels name the build: version (set at build time, \"dev\" otherwise) and goversion.",
	ConstLabels: prometheus.Labels{"version": buildinfo.Version, "goversion": buildinfo.GoVersion()},
})

func init() { buildInfo.Set(1) }
