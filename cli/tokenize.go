package cli

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// countingReader counts the bytes read through it, for progress.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// tokenizeStdin reads stdin, writes its token ids to stdout and their
// count to stderr, unless the JSON output has it (issue 15 item 12). On a terminal stdin it first says
// how to end the text; on a terminal stderr it shows what it is doing
// while it reads and tokenizes.
func tokenizeStdin(cmd *cobra.Command, tok *tokenizer.Tokenizer, o tokenizer.PrintOptions) error {
	stderr := cmd.ErrOrStderr()
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		fmt.Fprintln(stderr, "ftchat tokenize: type or paste the text, then Ctrl+D on a line of its own (or: ftchat tokenize < FILE)")
	}
	cr := &countingReader{r: in}
	st := startStatus(stderr, func(d time.Duration) string {
		return fmt.Sprintf("reading stdin · %s · %s", kvcache.FormatBytes(cr.n.Load()), shortDuration(d))
	})
	text, err := io.ReadAll(cr)
	st.Stop()
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	st = startStatus(stderr, func(d time.Duration) string {
		return fmt.Sprintf("tokenizing %s · %s", kvcache.FormatBytes(int64(len(text))), shortDuration(d))
	})
	n, err := tokenizer.WriteIDsCount(cmd.OutOrStdout(), tok, string(text), o)
	st.Stop()
	if err != nil {
		return err
	}
	if !o.JSON { // the JSON has its count
		fmt.Fprintf(stderr, "%s %s\n", formatCount(n), pluralWord(n, "token", "tokens"))
	}
	return nil
}

// formatCount writes n with thousands separators.
func formatCount(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
