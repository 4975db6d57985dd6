package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/ftchat/ftchat/engine"
)

// started is a request admitted into the batcher.
type started struct {
	events <-chan engine.BatchEvent
	prompt int // prompt tokens
	cached int // of which served from the cache
}

// start submits req and waits until it is admitted into the pool, so that
// errors up to then still get their HTTP status. The request's context
// (the client's connection) cancels it.
func (s *Server) start(r *http.Request, req engine.BatchRequest) (*started, *apiError) {
	ch, err := s.cfg.Batcher.Submit(r.Context(), req)
	if err != nil {
		return nil, s.engineError(err, req.MaxTokens)
	}
	for ev := range ch {
		switch ev.Kind {
		case engine.EventProgress:
			return &started{events: ch, prompt: ev.Total, cached: ev.Done}, nil
		case engine.EventError:
			return nil, runtimeError(ev.Err)
		case engine.EventDone:
			return nil, &apiError{Status: 499, Message: "request cancelled"}
		}
	}
	return nil, &apiError{Status: 499, Message: "request cancelled"}
}

// runtimeError is an error the engine reported while answering.
func runtimeError(err error) *apiError {
	if errors.Is(err, engine.ErrBatcherClosed) {
		return &apiError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down"}
	}
	return &apiError{Status: http.StatusInternalServerError, Message: err.Error()}
}

// sse writes server-sent events, flushing each.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// send writes one event (name may be empty) with v as JSON data.
func (s *sse) send(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if name != "" {
		if _, err := fmt.Fprintf(s.w, "event: %s\n", name); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sse) raw(line string) error {
	if _, err := fmt.Fprint(s.w, line); err != nil {
		return err
	}
	return s.rc.Flush()
}
