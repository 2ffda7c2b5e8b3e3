package graveler

// Iterator is the one pull iterator used wherever iterators are merged,
// diffed or sought (shaped like Pebble's): call Next until it returns false,
// then check Err; Value is valid until the next call to Next or SeekGE.
// SeekGE repositions before the first element whose key is >= key, so the
// next Next returns it. Close releases resources and must always be called.
// An Iterator is not safe for concurrent use.
type Iterator[T any] interface {
	Next() bool
	Value() T
	SeekGE(key Key)
	Err() error
	Close()
}

// ValueIterator walks entries in key order.
type ValueIterator = Iterator[*ValueRecord]

// DiffIterator walks differences in key order.
type DiffIterator = Iterator[*Diff]
