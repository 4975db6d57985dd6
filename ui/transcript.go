package ui

import (
	"bufio"
	"io"
	"os"

	"github.com/charmbracelet/colorprofile"
)

// printTranscript writes the chat as it was on screen to out, after the
// program has left the alternate screen, so that the conversation stays
// in the terminal's scrollback (issue 15 item 17). Colors are reduced to
// what the terminal supports.
func (m *model) printTranscript(out io.Writer, profile colorprofile.Profile) {
	if len(m.entries) == 0 {
		return
	}
	cw := colorprofile.NewWriter(out, os.Environ())
	if profile != 0 {
		cw.Profile = profile
	}
	w := bufio.NewWriter(cw)
	for i, e := range m.entries {
		if i > 0 {
			w.WriteByte('\n')
		}
		for _, l := range m.r.render(e, m.showThink) {
			w.WriteString(l)
			w.WriteByte('\n')
		}
	}
	w.WriteByte('\n')
	w.Flush()
}
