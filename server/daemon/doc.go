// Package daemon runs gravelerd: it turns a validated Config into a
// running gRPC server on etcd (external, or embedded under the data
// directory) and a blob store, with a metrics listener (and Go's profiler
// on it when Config.EnablePprof says so), a health prober, and a graceful
// shutdown. With the embedded etcd, Run holds a lock in the data
// directory while it runs, so that a second process on the same directory
// fails at once (ErrDataDirInUse) instead of waiting on etcd's own lock.
//
// Run is the only long-running entry point; it returns when its context
// ends (after closing the change feed, which ends every WatchRefs stream
// with UNAVAILABLE, then draining in-flight calls, bounded by
// Config.ShutdownTimeout, then closing the store and the embedded etcd)
// or when serving fails.
//
// Concurrency: several Runs may serve in one process at once (tests and
// gravelerbench do) if their listen addresses and data directories
// differ; they share the process's Prometheus metrics, and the range
// cache's are exported by the first only. Config.Ready is called on
// Run's goroutine. Config.Validate fills in defaults in place: do not
// call it on a Config another goroutine reads (Run works on its copy).
//
// Errors: Config.Validate reports every invalid setting at once, each
// wrapping ErrInvalidConfig; a data directory another process holds is
// ErrDataDirInUse. Every error is prefixed "gravelerd:".
package daemon
