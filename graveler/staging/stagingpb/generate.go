// Package stagingpb holds the storage record of graveler/staging (one
// staged entry or tombstone) as a protobuf message, generated from
// stagingpb.proto. Regenerate with `go generate ./graveler/staging/stagingpb`:
// buf and protoc-gen-go run through the Go toolchain at pinned versions.
package stagingpb

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
