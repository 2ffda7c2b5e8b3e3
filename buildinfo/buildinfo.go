// Package buildinfo names the build a binary comes from, for --version,
// the start-up log line, the graveler_build_info metric (package
// buildinfo/metric) and the GetServerVersion RPC.
//
// Version is set at link time:
//
//	go build -ldflags "-X graveler/buildinfo.Version=v1.2.3" ./cmd/...
//
// and is "dev" otherwise. Everything here is read-only after start-up and
// safe for concurrent use; nothing returns an error.
package buildinfo

import "runtime"

// Version is the release this binary was built as ("dev" unless the
// build set it with -ldflags -X). It is a variable only so that the linker
// can set it; nothing assigns it at run time.
var Version = "dev"

// GoVersion is the Go release the binary was built with.
func GoVersion() string { return runtime.Version() }

// String is the one-line form --version prints: "<program> <version> (<go version>)".
func String(program string) string {
	return program + " " + Version + " (" + GoVersion() + ")"
}
