package ui

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// copyNative copies text with the platform's clipboard tool when one is
// available; OSC 52 (sent separately) covers terminals and SSH sessions.
func copyNative(text string) (string, error) {
	type tool struct {
		ok   bool
		name string
		args []string
	}
	tools := []tool{
		{os.Getenv("WAYLAND_DISPLAY") != "", "wl-copy", nil},
		{os.Getenv("DISPLAY") != "", "xclip", []string{"-selection", "clipboard"}},
		{os.Getenv("DISPLAY") != "", "xsel", []string{"--clipboard", "--input"}},
		{runtime.GOOS == "darwin", "pbcopy", nil},
		{runtime.GOOS == "windows" || os.Getenv("WSL_DISTRO_NAME") != "", "clip.exe", nil},
	}
	for _, t := range tools {
		if !t.ok {
			continue
		}
		path, err := exec.LookPath(t.name)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		cmd := exec.CommandContext(ctx, path, t.args...)
		cmd.Stdin = strings.NewReader(text)
		err = cmd.Run()
		cancel()
		if err != nil {
			return "", errors.New(t.name + " failed: " + err.Error())
		}
		return t.name, nil
	}
	return "", errors.New("no native clipboard tool found")
}
