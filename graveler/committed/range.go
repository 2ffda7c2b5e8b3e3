package committed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"

	"graveler/graveler"
)

// ErrCorrupt: a stored range or metarange failed its checksums or does not
// parse. Stored objects are immutable and content-addressed, so this is data
// damage, never a transient condition.
var ErrCorrupt = errors.New("committed: corrupt object")

// Range file format constants (see the package documentation).
const (
	rangeMagic uint32 = 0x47524e47 // "GRNG" read as a big-endian word
	// leafVersion is the format of leaves (ranges), and of the one-level
	// trees' metaranges: no level in the footer.
	leafVersion uint32 = 1
	// nodeVersion is the format of inner nodes: the footer holds the level.
	nodeVersion   uint32 = 2
	footerLen            = 8 + 8 + 8 + 4 + 4 + 4
	nodeFooterLen        = footerLen + 4
	crcLen               = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// rangeBlock locates one data block: its records occupy data[off:off+n] and
// their crc32c follows.
type rangeBlock struct {
	first, last graveler.Key
	off, n      int
	count       int
}

// rangeBuilder encodes one range file from records added in strictly
// increasing key order. Its output depends only on the records and the
// block size, which is what makes range IDs reproducible.
type rangeBuilder struct {
	// level 0 writes a leaf (version 1 footer), above an inner node
	// (version 2 footer holding the level).
	level      int
	blockSize  int
	buf        []byte
	blockStart int
	blockCount int
	blockFirst []byte
	first      []byte
	lastKey    []byte
	blocks     []rangeBlock
	count      int
	// size is the total of the encoded records: the measure that
	// content-defined boundaries compare with Config's sizes.
	size int
}

// newRangeBuilder starts a range in buf (appended to from its start):
// a buffer sized for the range spares growing one for every range.
func newRangeBuilder(blockSize int, buf []byte) *rangeBuilder {
	return &rangeBuilder{blockSize: blockSize, buf: buf[:0]}
}

func (b *rangeBuilder) empty() bool { return b.count == 0 }

// recordLen is the encoded length of one record.
func recordLen(key, identity, data []byte) int {
	return uvarintLen(uint64(len(key))) + len(key) +
		uvarintLen(uint64(len(identity))) + len(identity) +
		uvarintLen(uint64(len(data))) + len(data)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func (b *rangeBuilder) add(key, identity, data []byte) {
	start := len(b.buf)
	if b.count == 0 {
		b.first = append([]byte(nil), key...)
	}
	b.buf = binary.AppendUvarint(b.buf, uint64(len(key)))
	b.buf = append(b.buf, key...)
	b.buf = binary.AppendUvarint(b.buf, uint64(len(identity)))
	b.buf = append(b.buf, identity...)
	b.buf = binary.AppendUvarint(b.buf, uint64(len(data)))
	b.buf = append(b.buf, data...)
	b.size += len(b.buf) - start
	b.count++
	b.blockCount++
	// Keys are kept as sub-slices of buf only after the block is sealed;
	// until then buf may move, so remember a private copy.
	b.lastKey = append(b.lastKey[:0], key...)
	if b.blockCount == 1 {
		b.blockFirst = append([]byte(nil), key...)
	}
	if len(b.buf)-b.blockStart >= b.blockSize {
		b.sealBlock()
	}
}

func (b *rangeBuilder) sealBlock() {
	if b.blockCount == 0 {
		return
	}
	n := len(b.buf) - b.blockStart
	b.blocks = append(b.blocks, rangeBlock{
		first: b.blockFirst,
		last:  append(graveler.Key(nil), b.lastKey...),
		off:   b.blockStart,
		n:     n,
		count: b.blockCount,
	})
	b.buf = binary.LittleEndian.AppendUint32(b.buf, crc32.Checksum(b.buf[b.blockStart:], castagnoli))
	b.blockStart = len(b.buf)
	b.blockCount = 0
	b.blockFirst = nil
}

// finish returns the complete file in a new buffer of its own (the blob
// store may keep it). The builder must not be used after.
func (b *rangeBuilder) finish() []byte {
	return bytes.Clone(b.encode())
}

// take returns the complete file in the builder's own buffer, uncopied:
// for a caller that gave the builder a buffer of its own. The builder
// must not be used after.
func (b *rangeBuilder) take() []byte { return b.encode() }

func (b *rangeBuilder) encode() []byte {
	b.sealBlock()
	indexOff := len(b.buf)
	b.buf = binary.AppendUvarint(b.buf, uint64(len(b.blocks)))
	for _, blk := range b.blocks {
		b.buf = binary.AppendUvarint(b.buf, uint64(len(blk.first)))
		b.buf = append(b.buf, blk.first...)
		b.buf = binary.AppendUvarint(b.buf, uint64(len(blk.last)))
		b.buf = append(b.buf, blk.last...)
		b.buf = binary.AppendUvarint(b.buf, uint64(blk.off))
		b.buf = binary.AppendUvarint(b.buf, uint64(blk.n))
		b.buf = binary.AppendUvarint(b.buf, uint64(blk.count))
	}
	indexLen := len(b.buf) - indexOff
	b.buf = binary.LittleEndian.AppendUint32(b.buf, crc32.Checksum(b.buf[indexOff:], castagnoli))
	footer := len(b.buf)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(indexOff))
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(indexLen))
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(b.count))
	version := leafVersion
	if b.level > 0 {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(b.level))
		version = nodeVersion
	}
	b.buf = binary.LittleEndian.AppendUint32(b.buf, rangeMagic)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, version)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, crc32.Checksum(b.buf[footer:], castagnoli))
	return b.buf
}

// rangeFile is a parsed, fully verified range file. It is immutable and
// shared by every iterator over it.
type rangeFile struct {
	data   []byte
	blocks []rangeBlock
	count  int
	// version and level from the footer: leaves and one-level metaranges
	// are version 1 (level 0 here), inner nodes version 2 with level >= 1.
	version uint32
	level   int
}

// parseRange verifies every checksum and the structure of every record, so
// iterators over the result never meet a decoding error.
func parseRange(data []byte) (*rangeFile, error) {
	if len(data) < footerLen {
		return nil, corruptf("%d bytes is shorter than a footer", len(data))
	}
	tail := data[len(data)-12:]
	if m := binary.LittleEndian.Uint32(tail); m != rangeMagic {
		return nil, corruptf("bad magic %08x", m)
	}
	version := binary.LittleEndian.Uint32(tail[4:])
	flen := footerLen
	switch version {
	case leafVersion:
	case nodeVersion:
		flen = nodeFooterLen
		if len(data) < flen {
			return nil, corruptf("%d bytes is shorter than a footer", len(data))
		}
	default:
		return nil, corruptf("unsupported version %d", version)
	}
	footer := data[len(data)-flen:]
	if got, want := crc32.Checksum(footer[:flen-crcLen], castagnoli), binary.LittleEndian.Uint32(footer[flen-crcLen:]); got != want {
		return nil, corruptf("footer checksum %08x, stored %08x", got, want)
	}
	indexOff := binary.LittleEndian.Uint64(footer[0:])
	indexLen := binary.LittleEndian.Uint64(footer[8:])
	count := binary.LittleEndian.Uint64(footer[16:])
	level := 0
	if version == nodeVersion {
		l := binary.LittleEndian.Uint32(footer[24:])
		if l == 0 || l > maxLevel {
			return nil, corruptf("inner node of level %d", l)
		}
		level = int(l)
	}
	body := uint64(len(data) - flen)
	if indexOff > body || indexLen > body-indexOff || body-indexOff-indexLen != crcLen {
		return nil, corruptf("index at %d+%d does not end before the footer", indexOff, indexLen)
	}
	index := data[indexOff : indexOff+indexLen]
	if got, want := crc32.Checksum(index, castagnoli), binary.LittleEndian.Uint32(data[indexOff+indexLen:]); got != want {
		return nil, corruptf("index checksum %08x, stored %08x", got, want)
	}
	d := decoder{b: index}
	nblocks := d.uvarint()
	if d.err != nil || nblocks > uint64(len(index)) {
		return nil, corruptf("bad block count")
	}
	f := &rangeFile{data: data, blocks: make([]rangeBlock, 0, nblocks), version: version, level: level}
	next := 0
	total := 0
	for i := uint64(0); i < nblocks; i++ {
		var blk rangeBlock
		blk.first = d.bytes()
		blk.last = d.bytes()
		off, n, cnt := d.uvarint(), d.uvarint(), d.uvarint()
		if d.err != nil {
			return nil, corruptf("block %d: bad index entry", i)
		}
		if off != uint64(next) || n == 0 || n > indexOff || off+n+crcLen > indexOff {
			return nil, corruptf("block %d at %d+%d is misplaced", i, off, n)
		}
		blk.off, blk.n, blk.count = int(off), int(n), int(cnt)
		rec := data[blk.off : blk.off+blk.n]
		if got, want := crc32.Checksum(rec, castagnoli), binary.LittleEndian.Uint32(data[blk.off+blk.n:]); got != want {
			return nil, corruptf("block %d checksum %08x, stored %08x", i, got, want)
		}
		if err := checkBlock(rec, &blk, f.lastKey()); err != nil {
			return nil, corruptf("block %d: %v", i, err)
		}
		f.blocks = append(f.blocks, blk)
		next = blk.off + blk.n + crcLen
		total += blk.count
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, corruptf("trailing bytes in index")
	}
	if uint64(next) != indexOff {
		return nil, corruptf("gap between the blocks and the index")
	}
	if uint64(total) != count {
		return nil, corruptf("footer counts %d records, blocks hold %d", count, total)
	}
	f.count = total
	return f, nil
}

func (f *rangeFile) lastKey() graveler.Key {
	if len(f.blocks) == 0 {
		return nil
	}
	return f.blocks[len(f.blocks)-1].last
}

// checkBlock walks a block's records: keys strictly increasing (and after
// prev), the count and the first and last keys as the index says.
func checkBlock(rec []byte, blk *rangeBlock, prev graveler.Key) error {
	d := decoder{b: rec}
	n := 0
	for len(d.b) > 0 {
		k := d.bytes()
		d.bytes()
		d.bytes()
		if d.err != nil {
			return d.err
		}
		if len(k) == 0 || (prev != nil && bytes.Compare(prev, k) >= 0) {
			return errors.New("keys out of order")
		}
		if n == 0 && !bytes.Equal(k, blk.first) {
			return errors.New("first key differs from the index")
		}
		prev = k
		n++
	}
	if n == 0 || n != blk.count || !bytes.Equal(prev, blk.last) {
		return errors.New("records differ from the index")
	}
	return nil
}

// decoder reads varint-framed fields; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated field")

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errTruncated
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns a length-prefixed field aliasing the input, capped so an
// append by a caller cannot write into the shared buffer.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errTruncated
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// rangeIter walks one range file. Records alias the file's bytes, which are
// immutable; callers must not modify them.
type rangeIter struct {
	f   *rangeFile
	bi  int // current block
	pos int // offset of the next record within data
	end int // end of the current block's records
	rec *graveler.ValueRecord
}

func newRangeIter(f *rangeFile) *rangeIter {
	it := &rangeIter{f: f}
	it.setBlock(0)
	return it
}

func (it *rangeIter) setBlock(bi int) {
	it.bi = bi
	if bi < len(it.f.blocks) {
		it.pos = it.f.blocks[bi].off
		it.end = it.pos + it.f.blocks[bi].n
	} else {
		it.pos, it.end = 0, 0
	}
}

func (it *rangeIter) Next() bool {
	k, id, v, ok := it.nextRaw()
	if !ok {
		it.rec = nil
		return false
	}
	it.rec = &graveler.ValueRecord{Key: k, Value: &graveler.Value{Identity: id, Data: v}}
	return true
}

// nextRaw steps like Next without allocating a record (Value is not set).
func (it *rangeIter) nextRaw() (key, identity, data []byte, ok bool) {
	for it.pos >= it.end {
		if it.bi >= len(it.f.blocks) {
			return nil, nil, nil, false
		}
		it.setBlock(it.bi + 1)
		if it.bi >= len(it.f.blocks) {
			return nil, nil, nil, false
		}
	}
	d := decoder{b: it.f.data[it.pos:it.end]}
	key, identity, data = d.bytes(), d.bytes(), d.bytes()
	it.pos = it.end - len(d.b)
	return key, identity, data, true
}

func (it *rangeIter) Value() *graveler.ValueRecord { return it.rec }

// SeekGE finds the block by binary search over the index, then scans it.
func (it *rangeIter) SeekGE(key graveler.Key) {
	it.rec = nil
	bi := sort.Search(len(it.f.blocks), func(i int) bool { return bytes.Compare(it.f.blocks[i].last, key) >= 0 })
	it.setBlock(bi)
	for it.pos < it.end {
		d := decoder{b: it.f.data[it.pos:it.end]}
		k := d.bytes()
		if bytes.Compare(k, key) >= 0 {
			return
		}
		d.bytes()
		d.bytes()
		it.pos = it.end - len(d.b)
	}
}

func (it *rangeIter) Err() error { return nil }
func (it *rangeIter) Close()     {}
