package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// jsonOpts: the proto field names (snake_case) everywhere, so that -o json,
// dump files and grpcurl's output name fields alike.
var jsonOpts = protojson.MarshalOptions{UseProtoNames: true}

// marshalJSON renders m as one line of JSON, ending in a newline: protobuf's
// JSON mapping with proto field names, except that every bytes field F
// (keys, identities, data) appears twice: F_base64, always, with the exact
// bytes, and F as a string when the bytes are valid UTF-8 (left out when
// they are not). Object keys are sorted, so equal messages print equal lines.
func marshalJSON(m proto.Message) ([]byte, error) {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if obj, ok := v.(map[string]any); ok {
		readableBytes(m.ProtoReflect(), obj)
	}
	return encodeJSON(v)
}

// readableBytes rewrites the bytes fields of obj, the JSON of m, and of the
// messages within it.
func readableBytes(m protoreflect.Message, obj map[string]any) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		switch {
		case fd.IsMap():
			// No map of the API holds bytes.
		case fd.IsList():
			arr, ok := obj[name].([]any)
			if !ok || fd.Kind() != protoreflect.MessageKind {
				continue
			}
			list := m.Get(fd).List()
			for j := 0; j < list.Len() && j < len(arr); j++ {
				if sub, ok := arr[j].(map[string]any); ok {
					readableBytes(list.Get(j).Message(), sub)
				}
			}
		case fd.Kind() == protoreflect.BytesKind:
			if fd.ContainingOneof() != nil && !m.Has(fd) {
				continue
			}
			bytesField(obj, name, m.Get(fd).Bytes())
		case fd.Kind() == protoreflect.MessageKind && m.Has(fd):
			if sub, ok := obj[name].(map[string]any); ok {
				readableBytes(m.Get(fd).Message(), sub)
			}
		}
	}
}

// bytesField sets name (when b is UTF-8) and name_base64 in obj.
func bytesField(obj map[string]any, name string, b []byte) {
	obj[name+"_base64"] = base64.StdEncoding.EncodeToString(b)
	if utf8.Valid(b) {
		obj[name] = string(b)
	} else {
		delete(obj, name)
	}
}

// encodeJSON is json.Marshal without HTML escaping, plus a newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// displayKey is a key for human output: as it is when it is printable
// UTF-8, else (control characters, invalid UTF-8, a leading quote) quoted
// Go-style, so that one key is one line and cannot drive the terminal.
func displayKey(k []byte) string {
	s := string(k)
	if !utf8.ValidString(s) || len(s) > 0 && s[0] == '"' {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
