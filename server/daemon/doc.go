// Package daemon runs gravelerd: it turns a validated Config into a
// running gRPC server on etcd (external, or embedded under the data
// directory) and a blob store, with a metrics/pprof listener, a health
// prober, and a graceful shutdown.
//
// Run is the only long-running entry point; it returns when its context
// ends (after draining in-flight calls, bounded by Config.ShutdownTimeout,
// then closing the store and the embedded etcd) or when serving fails.
// Config.Validate reports every invalid setting at once. Errors are
// prefixed "gravelerd:".
package daemon
