package cleaner

import "errors"

// ErrRunFailed: a pass could not read what it needs to decide safely what
// to reclaim (repository records, the work list, live tokens, partitions),
// so it stopped; nothing unsafe was done and the next pass retries.
var ErrRunFailed = errors.New("cleaner: pass failed")
