package committed

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"

	"graveler/graveler"
)

// packsPrefix holds packs: packsPrefix + a random 128-bit name in hex.
const packsPrefix = "_graveler/packs/"

const (
	packIDLen = 32 // hex digits of a pack's random name
	// packMagic and packVersion end a pack's footer.
	packMagic   uint32 = 0x4752504b // "GRPK" read as a big-endian word
	packVersion uint32 = 1
	// packFooterLen: u64 index offset, u64 index length, u64 count, u32
	// magic, u32 version, u32 crc.
	packFooterLen = 8 + 8 + 8 + 4 + 4 + 4
	// locMagic ends the locations trailer of an inner node whose children
	// sit in packs. It is where a node's footer holds its version, so a
	// reader tells the two apart by that word.
	locMagic uint32 = 0x47524c43 // "GRLC"
	// locTrailerTail: u32 body length, u32 magic, u32 crc.
	locTrailerTail = 12
	// DefaultPackBytes is the size past which a writer seals a pack and
	// starts the next: a commit's new objects fit one, a bulk build of
	// millions of entries writes one every few thousand objects.
	DefaultPackBytes = 8 << 20
	// packsInFlight bounds the sealed packs one writer has being stored,
	// so that a bulk build holds at most this many plus the one filling.
	packsInFlight = 2
	// maxStoredObject bounds the length a location may give an object:
	// far above any range or node (one record past MaxRangeSize), far
	// below what a damaged trailer could make a reader allocate.
	maxStoredObject = 1 << 30
)

// Location says where a child's object is stored: the zero Location is a
// standalone object (RangesPrefix or MetaRangesPrefix followed by its
// ID); otherwise Length bytes at Offset of pack Pack. Where an object is
// stored is no part of its content, so it does not enter any ID: the same
// entries make the same tree wherever its objects are stored.
type Location struct {
	// Pack is the pack's name: 32 lowercase hex digits.
	Pack           string
	Offset, Length int64
}

// Packed reports whether l places an object in a pack.
func (l Location) Packed() bool { return l.Pack != "" }

// PackObjectName is the blob name of pack id.
func PackObjectName(id string) string { return packsPrefix + id }

func newPackID() string {
	var b [packIDLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func validPackID(s string) bool {
	if len(s) != packIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// packEntry is one object of a pack, as its index lists it.
type packEntry struct {
	id     [sha256.Size]byte
	node   bool
	offset int64
	length int64
}

// packBuilder gathers the objects of one pack in memory, each in the
// buffer it was built in: the pack is copied together once, when sealed,
// not grown object by object (which cost a 1M-entry commit a third of
// its CPU in copies).
type packBuilder struct {
	id      string
	objects [][]byte
	size    int
	entries []packEntry
}

// add appends one object and returns where it will be stored. data is
// the pack's from then on: the caller must not change it.
func (p *packBuilder) add(id string, node bool, data []byte) Location {
	e := packEntry{node: node, offset: int64(p.size), length: int64(len(data))}
	hex.Decode(e.id[:], []byte(id))
	p.entries = append(p.entries, e)
	p.objects = append(p.objects, data)
	p.size += len(data)
	return Location{Pack: p.id, Offset: e.offset, Length: e.length}
}

// finish returns the pack's bytes as stored: its objects, then the index
// and the footer.
//
//	pack   = object* index crc32c(index) footer
//	index  = entry*
//	entry  = id[32] u8 kind (0 range, 1 inner node) uvarint(offset) uvarint(length)
//	footer = u64 indexOffset, u64 indexLength, u64 count, u32 magic,
//	         u32 version, u32 crc32c(the preceding footer bytes)
func (p *packBuilder) finish() []byte {
	buf := make([]byte, 0, p.size+len(p.entries)*(sha256.Size+1+2*binary.MaxVarintLen32)+crcLen+packFooterLen)
	for _, o := range p.objects {
		buf = append(buf, o...)
	}
	p.objects = nil
	indexOff := len(buf)
	for _, e := range p.entries {
		buf = append(buf, e.id[:]...)
		kind := byte(0)
		if e.node {
			kind = 1
		}
		buf = append(buf, kind)
		buf = binary.AppendUvarint(buf, uint64(e.offset))
		buf = binary.AppendUvarint(buf, uint64(e.length))
	}
	indexLen := len(buf) - indexOff
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[indexOff:], castagnoli))
	footer := len(buf)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(indexOff))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(indexLen))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(p.entries)))
	buf = binary.LittleEndian.AppendUint32(buf, packMagic)
	buf = binary.LittleEndian.AppendUint32(buf, packVersion)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[footer:], castagnoli))
}

// ReadPackIndex returns the objects pack id (a blob of size bytes, as a
// listing gives) holds, reading its footer and index, not the objects:
// a collector keeps a pack while any object in it is live. Kind, ID and
// Blob (the pack's name) are set. Errors: an error wrapping
// ErrBlobNotFound when the pack is missing, ErrCorrupt when its footer or
// index is damaged, a blob store failure wrapped.
func ReadPackIndex(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id string, size int64) ([]TreeObject, error) {
	if !validPackID(id) {
		return nil, fmt.Errorf("%w: pack %q", ErrInvalidID, id)
	}
	name := packsPrefix + id
	if size < packFooterLen {
		return nil, fmt.Errorf("%w: pack %s of %d bytes", ErrCorrupt, id, size)
	}
	footer, err := readStored(ctx, blobs, ns, "", Location{Pack: id, Offset: size - packFooterLen, Length: packFooterLen})
	if err != nil {
		return nil, fmt.Errorf("committed: read pack %s: %w", id, err)
	}
	off, n, err := parsePackFooter(footer, size)
	if err != nil {
		return nil, fmt.Errorf("committed: pack %s: %w", id, err)
	}
	index, err := readStored(ctx, blobs, ns, "", Location{Pack: id, Offset: off, Length: n})
	if err != nil {
		return nil, fmt.Errorf("committed: read pack %s: %w", id, err)
	}
	entries, err := parsePackIndex(index, off)
	if err != nil {
		return nil, fmt.Errorf("committed: pack %s: %w", id, err)
	}
	objs := make([]TreeObject, len(entries))
	for i, e := range entries {
		objs[i] = TreeObject{Kind: ObjectRange, ID: hex.EncodeToString(e.id[:]), Blob: name}
		if e.node {
			objs[i].Kind = ObjectMetaRange
		}
	}
	return objs, nil
}

// parsePackFooter checks a pack's footer against the pack's size and
// returns where its index is: offset, and length with its checksum.
func parsePackFooter(footer []byte, size int64) (offset, length int64, err error) {
	if len(footer) != packFooterLen || size < packFooterLen {
		return 0, 0, corruptf("pack footer of %d bytes in a pack of %d", len(footer), size)
	}
	if got, want := crc32.Checksum(footer[:packFooterLen-crcLen], castagnoli), binary.LittleEndian.Uint32(footer[packFooterLen-crcLen:]); got != want {
		return 0, 0, corruptf("pack footer checksum %08x, stored %08x", got, want)
	}
	if m, v := binary.LittleEndian.Uint32(footer[24:]), binary.LittleEndian.Uint32(footer[28:]); m != packMagic || v != packVersion {
		return 0, 0, corruptf("pack magic %08x version %d", m, v)
	}
	off, n := binary.LittleEndian.Uint64(footer[0:]), binary.LittleEndian.Uint64(footer[8:])
	body := uint64(size - packFooterLen)
	if off > body || n > body-off || body-off-n != crcLen {
		return 0, 0, corruptf("pack index at %d+%d does not end before the footer", off, n)
	}
	return int64(off), int64(n) + crcLen, nil
}

// parsePackIndex checks a pack's index (with its checksum) and returns
// the objects it lists, each placed within the first indexOffset bytes.
func parsePackIndex(index []byte, indexOffset int64) ([]packEntry, error) {
	if len(index) < crcLen {
		return nil, corruptf("pack index of %d bytes", len(index))
	}
	body := index[:len(index)-crcLen]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(index[len(body):]); got != want {
		return nil, corruptf("pack index checksum %08x, stored %08x", got, want)
	}
	var out []packEntry
	d := decoder{b: body}
	for len(d.b) > 0 {
		if len(d.b) < sha256.Size+1 {
			return nil, corruptf("pack index entry %d is truncated", len(out))
		}
		var e packEntry
		copy(e.id[:], d.b)
		switch d.b[sha256.Size] {
		case 0:
		case 1:
			e.node = true
		default:
			return nil, corruptf("pack index entry %d: kind %d", len(out), d.b[sha256.Size])
		}
		d.b = d.b[sha256.Size+1:]
		off, n := d.uvarint(), d.uvarint()
		if d.err != nil || n == 0 || off > uint64(indexOffset) || n > uint64(indexOffset)-off {
			return nil, corruptf("pack index entry %d: bad place", len(out))
		}
		e.offset, e.length = int64(off), int64(n)
		out = append(out, e)
	}
	return out, nil
}

// appendLocations appends the locations trailer of a node whose children
// are children (written only when one of them is packed):
//
//	trailer = body u32 len(body) u32 locMagic u32 crc32c(body and its length)
//	body    = uvarint(npacks) pack[16]* loc*      ; one loc per child, in order
//	loc     = uvarint(0)                          ; a standalone object
//	        | uvarint(k) uvarint(offset) uvarint(length) ; in the k-th pack
//
// The trailer follows the node's bytes and is not part of them: the
// node's ID hashes only what precedes it.
func appendLocations(dst []byte, children []RangeDescriptor) []byte {
	start := len(dst)
	var packs []string
	ref := map[string]int{}
	for i := range children {
		if p := children[i].Loc.Pack; p != "" {
			if _, ok := ref[p]; !ok {
				packs = append(packs, p)
				ref[p] = len(packs)
			}
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(packs)))
	for _, p := range packs {
		var raw [packIDLen / 2]byte
		hex.Decode(raw[:], []byte(p))
		dst = append(dst, raw[:]...)
	}
	for i := range children {
		l := children[i].Loc
		if !l.Packed() {
			dst = binary.AppendUvarint(dst, 0)
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(ref[l.Pack]))
		dst = binary.AppendUvarint(dst, uint64(l.Offset))
		dst = binary.AppendUvarint(dst, uint64(l.Length))
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(dst)-start))
	dst = binary.LittleEndian.AppendUint32(dst, locMagic)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// splitLocations splits a stored node into the bytes its ID hashes and
// its locations trailer (nil when it has none). ErrCorrupt when a trailer
// is there but damaged.
func splitLocations(data []byte) (node, trailer []byte, err error) {
	if len(data) < locTrailerTail || binary.LittleEndian.Uint32(data[len(data)-8:]) != locMagic {
		return data, nil, nil
	}
	n := int(binary.LittleEndian.Uint32(data[len(data)-locTrailerTail:]))
	if n > len(data)-locTrailerTail {
		return nil, nil, corruptf("locations trailer of %d bytes in an object of %d", n, len(data))
	}
	start := len(data) - locTrailerTail - n
	end := len(data) - crcLen
	if got, want := crc32.Checksum(data[start:end], castagnoli), binary.LittleEndian.Uint32(data[end:]); got != want {
		return nil, nil, corruptf("locations trailer checksum %08x, stored %08x", got, want)
	}
	return data[:start], data[start : start+n], nil
}

// applyLocations sets the Loc of each child from a node's trailer.
func applyLocations(trailer []byte, children []RangeDescriptor) error {
	d := decoder{b: trailer}
	np := d.uvarint()
	if d.err != nil || np > uint64(len(d.b))/(packIDLen/2) {
		return corruptf("locations trailer: bad pack count")
	}
	packs := make([]string, np)
	for i := range packs {
		packs[i] = hex.EncodeToString(d.b[:packIDLen/2])
		d.b = d.b[packIDLen/2:]
	}
	for i := range children {
		k := d.uvarint()
		if d.err != nil || k > np {
			return corruptf("locations trailer: child %d: bad pack", i)
		}
		if k == 0 {
			continue
		}
		off, n := d.uvarint(), d.uvarint()
		if d.err != nil || n == 0 || n > maxStoredObject || off > 1<<62 {
			return corruptf("locations trailer: child %d: bad place", i)
		}
		children[i].Loc = Location{Pack: packs[k-1], Offset: int64(off), Length: int64(n)}
	}
	if d.err != nil || len(d.b) != 0 {
		return corruptf("locations trailer: %d bytes past its last child", len(d.b))
	}
	return nil
}

// decodeStoredNode checks a stored inner node against id (its bytes,
// without a locations trailer, hash to it) and decodes it with its
// children's locations.
func decodeStoredNode(data []byte, id string) (*treeNode, error) {
	body, trailer, err := splitLocations(data)
	if err != nil {
		return nil, err
	}
	if got := contentID(body); got != id {
		return nil, fmt.Errorf("%w: content hashes to %s", ErrCorrupt, got)
	}
	n, err := decodeNode(body)
	if err != nil {
		return nil, err
	}
	n.stored = len(data)
	if trailer != nil {
		if err := applyLocations(trailer, n.children); err != nil {
			return nil, err
		}
		n.places = sha256.Sum256(trailer)
	}
	return n, nil
}
