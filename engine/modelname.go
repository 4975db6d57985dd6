package engine

import (
	"regexp"
	"strings"
)

var (
	// quantSuffix is a weight type at the end of a file name:
	// "….Q4_1", "…-Q4_K_M", "….IQ4_XS", "…-BF16".
	quantSuffix = regexp.MustCompile(`(?i)[.-]((?:I?Q\d+(?:_[A-Z0-9]+)*)|BF16|F16|F32)$`)
	// hashName is a content-addressed blob (ollama's "sha256-…").
	hashName = regexp.MustCompile(`(?i)^(sha256[-:])?[0-9a-f]{32,}$`)
)

// displayName names the model in the status pane and logs (issue 15 item
// 13). The file name comes first, since the user chose or pulled it, with
// its weight type set apart: "SmolLM2-135M-Instruct.Q4_1.gguf" reads
// "SmolLM2-135M-Instruct Q4_1". Converters fill general.name from a
// directory name, title-cased ("Smollm2 135M 8k Lc100K Mix1 Ep2"), so it
// is used only when the file name says nothing: a content hash.
func displayName(general, file string) string {
	base := file
	if len(base) > 5 && strings.EqualFold(base[len(base)-5:], ".gguf") {
		base = base[:len(base)-5]
	}
	if (hashName.MatchString(base) || base == "") && general != "" {
		return general
	}
	if loc := quantSuffix.FindStringSubmatchIndex(base); loc != nil && loc[0] > 0 {
		return base[:loc[0]] + " " + base[loc[2]:loc[3]]
	}
	return base
}
