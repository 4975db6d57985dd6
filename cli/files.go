package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ftchat/ftchat/internal/safefile"
)

// maxContextFile bounds one --file, as piped input is bounded.
const maxContextFile = 64 << 20

// attachFiles adds the --file texts to the piped context, each under a
// line naming it, and says where the context came from ("stdin",
// "main.go", "stdin, a.go, b.go").
func attachFiles(piped string, files []string) (string, string, error) {
	if len(files) == 0 {
		return piped, "", nil
	}
	var b strings.Builder
	var names []string
	if piped != "" {
		b.WriteString("==> stdin <==\n" + strings.TrimRight(piped, "\n") + "\n\n")
		names = append(names, "stdin")
	}
	for _, f := range files {
		data, err := safefile.ReadFile(f, maxContextFile, "--file")
		if err != nil {
			return "", "", err
		}
		if len(files) == 1 && piped == "" {
			return string(data), filepath.Base(f), nil
		}
		fmt.Fprintf(&b, "==> %s <==\n%s\n\n", f, strings.TrimRight(string(data), "\n"))
		names = append(names, filepath.Base(f))
	}
	return strings.TrimRight(b.String(), "\n"), strings.Join(names, ", "), nil
}
