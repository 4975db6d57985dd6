// Package ui is ftchat's terminal user interface: a Bubble Tea v2 program
// with a streaming markdown chat view, a multi-line input, a live KV-cache
// status pane and slash commands, plus the non-interactive print mode.
package ui

import (
	"context"

	"github.com/ftchat/ftchat/engine"
)

// Engine is what the UI needs from *engine.Engine.
type Engine interface {
	// Stats is the single source of every number the status pane shows.
	Stats() engine.Stats
	// CountTokens counts the tokens of plain text (piped context).
	CountTokens(text string) int
	// FitCheck reports, before anything is sent, whether the rendered
	// request fits the KV pool; the error carries the token counts.
	FitCheck(req engine.Request) error
	// SwitchKV switches the KV dtype of the live pool, reporting the
	// tokens moved so far (first 0 / total); it changes nothing when it
	// refuses, and cancelling ctx keeps the old cache.
	SwitchKV(ctx context.Context, kvDType string, progress func(done, total int)) error
}

// Session is what the UI needs from *engine.Session: one conversation.
type Session interface {
	// Generate streams the answer to req; the channel is closed after
	// EventDone or EventError. Cancelling ctx stops within one token.
	Generate(ctx context.Context, req engine.Request) <-chan engine.Event
	// Reset drops the cached tokens (/clear, /load).
	Reset()
}

// fixedKV is an Engine whose KV cache ftchat cannot change (a remote
// server's): /kvdtype reports KVFixed's reason before starting a switch.
type fixedKV interface {
	KVFixed() error
}

// kvDTypes are the values /kvdtype accepts, in the order completion offers them.
var kvDTypes = []string{"fp8_e4m3", "fp8_e5m2", "bf16", "fp16", "auto"}
