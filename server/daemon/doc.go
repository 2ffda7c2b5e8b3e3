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
// Config.Validate reports every invalid setting at once. Errors are
// prefixed "gravelerd:".
package daemon
