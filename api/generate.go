// Package api holds the gRPC API's protobuf definitions (graveler/v1) and
// the Go generated from them. Regenerate with `go generate ./api/...`: buf
// and the protoc plugins run through the Go toolchain at pinned versions.
package api

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
