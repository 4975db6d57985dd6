package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/ftchat/ftchat/internal/safefile"
)

// hfFile is the subset of a Hugging Face tokenizer.json we understand.
type hfFile struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type         string           `json:"type"`
		Vocab        map[string]int32 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		IgnoreMerges bool             `json:"ignore_merges"`
		UnkToken     *string          `json:"unk_token"`
	} `json:"model"`
}

// hfComponent is any normalizer / pre-tokenizer / post-processor node.
type hfComponent struct {
	Type          string          `json:"type"`
	Normalizers   []hfComponent   `json:"normalizers"`
	Pretokenizers []hfComponent   `json:"pretokenizers"`
	Processors    []hfComponent   `json:"processors"`
	AddPrefix     bool            `json:"add_prefix_space"`
	UseRegex      *bool           `json:"use_regex"`
	Individual    bool            `json:"individual_digits"`
	Behavior      string          `json:"behavior"`
	Invert        bool            `json:"invert"`
	Pattern       json.RawMessage `json:"pattern"`
	Single        []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct{} `json:"Sequence"`
	} `json:"single"`
}

// hfConfig is the subset of tokenizer_config.json that names special tokens.
type hfConfig struct {
	BOS    json.RawMessage `json:"bos_token"`
	EOS    json.RawMessage `json:"eos_token"`
	Pad    json.RawMessage `json:"pad_token"`
	AddBOS *bool           `json:"add_bos_token"`
	AddEOS *bool           `json:"add_eos_token"`
}

// FromJSONFile loads a Hugging Face tokenizer.json (optionally gzipped). A
// tokenizer_config.json beside it, when present, names BOS/EOS/pad and says
// whether BOS/EOS are added.
func FromJSONFile(path string) (*Tokenizer, error) {
	data, err := readMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	var cfg []byte
	for _, name := range []string{"tokenizer_config.json", "tokenizer_config.json.gz"} {
		c, err := readMaybeGzip(filepath.Join(dir, name))
		if err == nil {
			cfg = c
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	t, err := FromJSON(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// MaxJSONFile bounds a tokenizer.json or tokenizer_config.json, before and
// after gunzip: real ones are under 20 MB (Qwen3's is 11 MB), and the bound
// stops a gzip bomb or a wrong path from reading until memory runs out.
const MaxJSONFile = 64 << 20

func readMaybeGzip(path string) ([]byte, error) {
	data, err := safefile.ReadFile(path, MaxJSONFile, "tokenizer")
	if err != nil {
		return nil, err
	}
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		data, err = safefile.ReadAll(zr, MaxJSONFile, "tokenizer", path+" (gunzipped)")
		if err != nil {
			return nil, err
		}
	}
	return data, nil
}

// FromJSON builds a tokenizer from the contents of tokenizer.json and,
// optionally (nil), tokenizer_config.json.
func FromJSON(data, config []byte) (*Tokenizer, error) {
	const src = "tokenizer.json"
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: not valid JSON: %w", src, err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: model.type %q is not supported (supported: BPE)", src, f.Model.Type)
	}
	s := newSpec(src)
	s.model = ByteLevelBPE
	s.ignoreMerges = f.Model.IgnoreMerges

	var err error
	if s.nfc, err = hfNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if s.pre, err = hfPreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}

	// The token tables are dense, indexed by id: an id must not be much
	// larger than the number of entries, or a crafted id near 2^31 makes
	// them gigabytes.
	entries := len(f.Model.Vocab) + len(f.AddedTokens)
	n := 0
	for tok, id := range f.Model.Vocab {
		if err := checkID(id, entries); err != nil {
			return nil, fmt.Errorf("%s: model.vocab %q: %w", src, tok, err)
		}
		n = max(n, int(id)+1)
	}
	s.tokens = make([]string, n)
	s.types = make([]TokenType, n)
	for i := range s.types {
		s.types[i] = TypeUnused // holes in the id space
	}
	for tok, id := range f.Model.Vocab {
		if s.types[id] != TypeUnused {
			a, b := min(tok, s.tokens[id]), max(tok, s.tokens[id]) // stable message
			return nil, fmt.Errorf("%s: model.vocab gives id %d to both %q and %q; each id must be used once", src, id, a, b)
		}
		s.tokens[id] = tok
		s.types[id] = TypeNormal
	}
	if s.merges, err = hfMerges(f.Model.Merges); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	byText := map[string]int32{}
	addedText := map[string]int32{}
	addedIDs := map[int32]string{}
	for _, a := range f.AddedTokens {
		if a.Content == "" {
			return nil, fmt.Errorf("%s: added token %d has empty content", src, a.ID)
		}
		if err := checkID(a.ID, entries); err != nil {
			return nil, fmt.Errorf("%s: added token %q: %w", src, a.Content, err)
		}
		if prev, dup := addedIDs[a.ID]; dup {
			return nil, fmt.Errorf("%s: added_tokens gives id %d to both %q and %q; each id must be used once", src, a.ID, prev, a.Content)
		}
		addedIDs[a.ID] = a.Content
		s.added = append(s.added, addedToken{text: a.Content, id: a.ID, special: a.Special})
		byText[a.Content] = a.ID
		addedText[a.Content] = a.ID
	}
	for tok, id := range f.Model.Vocab {
		if _, ok := byText[tok]; !ok {
			byText[tok] = id
		}
	}
	if f.Model.UnkToken != nil {
		if id, ok := byText[*f.Model.UnkToken]; ok {
			s.unk = id
		}
	}

	// Special tokens: tokenizer_config.json first, then the post-processor,
	// then well-known names.
	if err := hfPostProcessor(f.PostProcessor, byText, s); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if config != nil {
		var c hfConfig
		if err := json.Unmarshal(config, &c); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: not valid JSON: %w", err)
		}
		for _, x := range []struct {
			raw json.RawMessage
			dst *int32
		}{{c.BOS, &s.bos}, {c.EOS, &s.eos}, {c.Pad, &s.pad}} {
			if name := tokenName(x.raw); name != "" {
				id, ok := byText[name]
				if !ok {
					return nil, fmt.Errorf("tokenizer_config.json: token %q is not in the vocabulary", name)
				}
				*x.dst = id
			}
		}
		if c.AddBOS != nil {
			s.addBOS = *c.AddBOS
		}
		if c.AddEOS != nil {
			s.addEOS = *c.AddEOS
		}
	}
	if config == nil {
		// Without tokenizer_config.json, fall back on well-known names of
		// added tokens.
		guess := func(dst *int32, names ...string) {
			for _, name := range names {
				if id, ok := addedText[name]; ok && *dst < 0 {
					*dst = id
				}
			}
		}
		guess(&s.bos, "<|begin_of_text|>", "<s>", "<|startoftext|>")
		guess(&s.eos, "<|end_of_text|>", "<|endoftext|>", "</s>")
	}
	return s.build()
}

// maxIDGap is how many ids a tokenizer.json may leave unused: real files
// number their tokens densely, and the bound keeps the tables proportional
// to the file.
const maxIDGap = 1 << 16

// checkID refuses a negative id or one far beyond the entries of the file.
func checkID(id int32, entries int) error {
	if id < 0 {
		return fmt.Errorf("id %d is negative", id)
	}
	if int64(id) >= int64(entries)+maxIDGap {
		return fmt.Errorf("id %d is far beyond the %d tokens of the file (ids must number the tokens from 0, with at most %d unused)", id, entries, maxIDGap)
	}
	return nil
}

// tokenName reads "name" or {"content": "name"}.
func tokenName(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

func hfMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, m := range strs {
			a, b, ok := strings.Cut(m, " ")
			if !ok {
				return nil, fmt.Errorf("model.merges[%d] is %q, want two tokens separated by a space", i, m)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("model.merges is neither a list of \"a b\" strings nor of [a, b] pairs")
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("model.merges[%d] has %d elements, want 2", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

func hfNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, fmt.Errorf("normalizer: %w", err)
	}
	var flat func(c hfComponent) []hfComponent
	flat = func(c hfComponent) []hfComponent {
		if c.Type != "Sequence" {
			return []hfComponent{c}
		}
		var out []hfComponent
		for _, n := range c.Normalizers {
			out = append(out, flat(n)...)
		}
		return out
	}
	for _, n := range flat(c) {
		switch n.Type {
		case "NFC":
			nfc = true
		case "":
			return false, fmt.Errorf("normalizer has no type")
		default:
			return false, fmt.Errorf("normalizer %q is not supported (supported: none, NFC)", n.Type)
		}
	}
	return nfc, nil
}

func flatten(c hfComponent) []hfComponent {
	if c.Type != "Sequence" {
		return []hfComponent{c}
	}
	var out []hfComponent
	for _, p := range c.Pretokenizers {
		out = append(out, flatten(p)...)
	}
	return out
}

// hfPreTokenizer maps the known pre-tokenizer pipelines to scanners.
func hfPreTokenizer(raw json.RawMessage) (PreTokenizer, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", fmt.Errorf("pre_tokenizer is missing; byte-level BPE needs a ByteLevel pre-tokenizer")
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("pre_tokenizer: %w", err)
	}
	list := flatten(c)
	if len(list) == 0 {
		return "", fmt.Errorf("pre_tokenizer is an empty Sequence; byte-level BPE needs a ByteLevel pre-tokenizer")
	}
	last := list[len(list)-1]
	if last.Type != "ByteLevel" {
		return "", fmt.Errorf("pre_tokenizer ends with %q; only byte-level BPE (a ByteLevel pre-tokenizer) is supported from tokenizer.json — for SentencePiece models load the GGUF", last.Type)
	}
	if last.AddPrefix {
		return "", fmt.Errorf("pre_tokenizer ByteLevel with add_prefix_space=true is not supported")
	}
	useRegex := last.UseRegex == nil || *last.UseRegex
	rest := list[:len(list)-1]
	switch {
	case len(rest) == 0 && useRegex:
		return PreGPT2, nil
	case len(rest) == 1 && rest[0].Type == "Digits" && rest[0].Individual && useRegex:
		return PreSmolLM, nil
	case len(rest) == 1 && rest[0].Type == "Split" && !useRegex:
		sp := rest[0]
		var pat struct {
			Regex *string `json:"Regex"`
		}
		if err := json.Unmarshal(sp.Pattern, &pat); err != nil || pat.Regex == nil {
			return "", fmt.Errorf("pre_tokenizer Split has pattern %s; only Regex patterns are supported", string(sp.Pattern))
		}
		if sp.Behavior != "Isolated" || sp.Invert {
			return "", fmt.Errorf("pre_tokenizer Split with behavior %q invert=%v is not supported (want Isolated, invert=false)", sp.Behavior, sp.Invert)
		}
		p, ok := splitRegexes[*pat.Regex]
		if !ok {
			return "", fmt.Errorf("pre_tokenizer Split regex %q is not one of the known ones (GPT-2, Llama 3, Qwen2); add a scanner for it in engine/tokenizer/pretok.go", *pat.Regex)
		}
		return p, nil
	}
	names := make([]string, len(list))
	for i, p := range list {
		names[i] = p.Type
	}
	return "", fmt.Errorf("pre_tokenizer sequence [%s] is not supported (supported: ByteLevel; Digits+ByteLevel; Split(regex)+ByteLevel)", strings.Join(names, ", "))
}

// hfPostProcessor reads TemplateProcessing's single template: special tokens
// before $A are added as BOS, after it as EOS.
func hfPostProcessor(raw json.RawMessage, byText map[string]int32, s *spec) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	list := []hfComponent{c}
	if c.Type == "Sequence" {
		list = c.Processors
	}
	for _, p := range list {
		if p.Type != "TemplateProcessing" {
			continue
		}
		seenSeq := false
		for _, item := range p.Single {
			switch {
			case item.Sequence != nil:
				seenSeq = true
			case item.SpecialToken != nil:
				id, ok := byText[item.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("post_processor: special token %q is not in the vocabulary", item.SpecialToken.ID)
				}
				if seenSeq {
					s.eos, s.addEOS = id, true
				} else {
					s.bos, s.addBOS = id, true
				}
			}
		}
	}
	return nil
}
