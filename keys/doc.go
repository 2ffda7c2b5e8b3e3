// Package keys owns every partition name and key graveler writes to the kv
// store: it is the only place they are built and parsed, so the layout in
// docs/key-layout.md can be generated from (and checked against) it.
//
// Layout (below the store's configurable root prefix, default /graveler):
//
//	graveler/                          every repository
//	  repos/<repo>                     Repository record
//	  namespaces/<storage namespace>   NamespaceClaim (normalized namespace)
//	  gcsweeps/<storage namespace>     GC sweep record (normalized namespace)
//	graveler_deleted/                  work for the cleaner
//	  repos/<repo>/<unique_id>         a deleted repository's partition
//	  tokens/<staging_token>           a staging token to drop
//	repo/<repo>-<unique_id>/           one repository's refs
//	  branches/<branch>                Branch record
//	  commits/<commit_id>              Commit record
//	  tags/<tag>                       Tag record
//	staging/<staging_token>/           one staging token's entries
//	  key/<entry key>                  staged Value or tombstone (raw bytes)
//
// Every name that becomes part of a partition is validated here to be made
// of characters that cannot break a prefix ([A-Za-z0-9._-]); entry keys and
// the namespace of a claim are raw bytes, because they are the last element
// of their key.
//
// All functions are pure and safe for concurrent use. Errors: ErrInvalid,
// wrapped with the offending part and value.
package keys
