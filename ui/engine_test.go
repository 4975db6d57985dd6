package ui

import "github.com/ftchat/ftchat/engine"

// The real engine satisfies the interfaces the UI defines.
var (
	_ Engine  = (*engine.Engine)(nil)
	_ Session = (*engine.Session)(nil)
)
