package ref

import "graveler/graveler"

// DecodeCommit decodes a record stored under keys.Commit. It is exported
// for the change feed, which reads commit records from the etcd watch and
// from etcd directly.
func DecodeCommit(data []byte) (*graveler.Commit, error) { return decodeCommit(data) }

// DecodeTag decodes a record stored under keys.Tag: the commit the tag
// points at. It is exported for the change feed.
func DecodeTag(data []byte) (graveler.CommitID, error) { return decodeTag(data) }
