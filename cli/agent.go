package cli

import (
	"context"
	"errors"
)

// runAgent runs the coding agent (agent/); wired when the agent lands.
func runAgent(ctx context.Context, cfg Config, prompt string) error {
	return errors.New("--agent: the coding agent is not in this build yet")
}
