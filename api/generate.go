// Package api holds the gRPC API's protobuf definitions (graveler/v1) and
// the Go generated from them. Regenerate with `go generate ./api/...`: buf
// and the protoc plugins run through the Go toolchain at pinned versions.
//
// Concurrency and errors: the package has no Go API, only the go:generate
// directives; the generated package gravelerv1 documents its own. A
// generation fails (and writes nothing) when buf lint finds the .proto
// breaking its rules.
package api

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
