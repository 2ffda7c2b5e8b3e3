// Package stagingpb holds the storage record of graveler/staging (one
// staged entry or tombstone) as a protobuf message, generated from
// stagingpb.proto. Regenerate with `go generate ./graveler/staging/stagingpb`:
// buf and protoc-gen-go run through the Go toolchain at pinned versions.
//
// Concurrency: messages follow protobuf-go's rules: any number of
// goroutines may read or marshal one, none may change it meanwhile.
//
// Errors: none of its own; proto.Marshal and proto.Unmarshal return
// protobuf's. graveler/staging reads entries with its own parser of this
// wire format and reports a damaged one as its ErrCorruptRecord.
package stagingpb

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
