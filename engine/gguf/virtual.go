package gguf

import "fmt"

// NewVirtual builds a File that is not read from a GGUF: its metadata is kv
// and its tensors' bytes come from data (another format's mapping, or
// buffers converted at load time). It lets code written against *File (the
// model loader, the tokenizer, the chat template) take a model from
// another source, such as a Hugging Face checkpoint directory (engine/hfmodel).
// data must return exactly ti.Bytes() bytes for each of tensors; closeFn, if
// not nil, runs at Close. Offsets of tensors are ignored.
func NewVirtual(path string, kv []KV, tensors []TensorInfo, data func(TensorInfo) ([]byte, error), closeFn func() error) (*File, error) {
	f := &File{Path: path, Version: 3, Alignment: DefaultAlignment, data: []byte{}, unmap: closeFn,
		kv: map[string]any{}, tensorIdx: map[string]int{}, source: data}
	for _, e := range kv {
		if _, dup := f.kv[e.Key]; dup {
			return nil, fmt.Errorf("gguf: %s: duplicate metadata key %q", path, e.Key)
		}
		f.keys = append(f.keys, e.Key)
		f.kv[e.Key] = e.Value
	}
	for i, ti := range tensors {
		if _, dup := f.tensorIdx[ti.Name]; dup {
			return nil, fmt.Errorf("gguf: %s: duplicate tensor name %q", path, ti.Name)
		}
		if len(ti.Dims) > MaxDims {
			return nil, fmt.Errorf("gguf: %s: tensor %q has %d dimensions, at most %d allowed", path, ti.Name, len(ti.Dims), MaxDims)
		}
		f.tensorIdx[ti.Name] = i
	}
	f.Tensors = append([]TensorInfo(nil), tensors...)
	return f, nil
}

// virtualData serves TensorData for a NewVirtual file.
func (f *File) virtualData(ti TensorInfo) ([]byte, error) {
	b, err := f.source(ti)
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) != ti.Bytes() {
		return nil, fmt.Errorf("gguf: %s: tensor %q: source gave %d bytes, want %d", f.Path, ti.Name, len(b), ti.Bytes())
	}
	return b, nil
}
