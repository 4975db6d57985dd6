package agent

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/gguf"
)

// DetectToolMode reads a GGUF model's chat template and tells how the agent
// should offer tools: NativeTools when the template knows a tool-call
// format (the engine then renders tools and parses calls), PromptedTools
// when it does not. The engine makes the same decision from the same
// template (chat.ToolFormatFor), so the two agree.
func DetectToolMode(modelPath string) (ToolMode, chat.ToolFormat, error) {
	f, err := gguf.Open(modelPath)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	t, err := chat.FromGGUF(f)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: chat template: %w", modelPath, err)
	}
	src := t.Source
	if t.Fallback {
		src = ""
	}
	arch, _ := f.String("general.architecture")
	format := chat.ToolFormatFor(arch, src)
	if format == chat.ToolNone {
		return PromptedTools, chat.ToolHermes, nil
	}
	return NativeTools, format, nil
}
