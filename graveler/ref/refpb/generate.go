// Package refpb holds the storage records of graveler/ref (repositories,
// branches, commits, tags) as protobuf messages, generated from refpb.proto.
// Regenerate with `go generate ./graveler/ref/refpb`: buf and protoc-gen-go
// run through the Go toolchain at pinned versions.
//
// Concurrency: messages follow protobuf-go's rules: any number of
// goroutines may read or marshal one, none may change it meanwhile.
//
// Errors: none of its own. proto.Unmarshal of a damaged record returns
// protobuf's error, which graveler/ref wraps in ErrCorruptRecord.
package refpb

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
