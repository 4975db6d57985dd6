package ui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/hub"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// /model switching (issue 15 item 17): /model lists the models in the
// cache, /model NAME (or N, or a path) loads another one while the current
// one keeps serving the screen, then the chat continues on it with the
// same transcript. The new model's tokenizer and template differ, so its
// KV cache is built by prefilling the conversation again. Esc while
// loading keeps the old model; Esc while prefilling keeps the new model
// and leaves the rest of the prefill to the next message.

// ModelSource lists the models /model offers and loads one. Config.Models
// nil: /model only describes the model.
type ModelSource interface {
	// Models lists the models one can switch to, the current one marked.
	Models() ([]ModelChoice, error)
	// Load loads the model named by a Models name's Path, a file path or a
	// known name, reporting progress; the current model stays loaded.
	// Cancelling ctx abandons the load.
	Load(ctx context.Context, model string, progress func(engine.LoadProgress)) (*LoadedModel, error)
	// Use makes lm the current model and closes the one it replaces. The
	// UI calls it once it no longer uses the old one.
	Use(lm *LoadedModel)
}

// ModelChoice is one model /model can switch to.
type ModelChoice struct {
	Name    string // file name in the cache
	Path    string
	Size    int64
	ModTime time.Time
	Current bool
}

// LoadedModel is a loaded model with its chat session.
type LoadedModel struct {
	Engine  Engine
	Session Session
	Info    string // /model's description (Config.ModelInfo)
	Path    string
	Close   func() // frees the session and the engine
}

// prefiller is the engine session's Prefill (engine.Session.Prefill).
type prefiller interface {
	Prefill(ctx context.Context, req engine.Request, progress func(done, total int)) error
}

// CacheModels is the chat's ModelSource: the GGUF files in ftchat's model
// cache (what `ftchat models` lists), loaded with the options the chat
// started with (device, KV dtype, sizes), Model replaced.
type CacheModels struct {
	opts     engine.Options
	describe func(engine.Info) string

	mu  sync.Mutex
	cur *LoadedModel
	// kvAtLoad is the current model's KV dtype when it was loaded; a
	// different one now is a /kvdtype choice, kept in kvChoice for the
	// models loaded after it.
	kvAtLoad, kvChoice string
}

// NewCacheModels starts from the model the chat runs (eng, sess), loaded
// with opts; describe gives /model's text for a model (nil: DescribeModel).
func NewCacheModels(opts engine.Options, eng *engine.Engine, sess *engine.Session, describe func(engine.Info) string) *CacheModels {
	if describe == nil {
		describe = DescribeModel
	}
	c := &CacheModels{opts: opts, describe: describe, kvAtLoad: eng.Stats().KVDType}
	c.cur = c.loaded(eng, sess)
	return c
}

func (c *CacheModels) loaded(eng *engine.Engine, sess *engine.Session) *LoadedModel {
	return &LoadedModel{Engine: eng, Session: sess, Info: c.describe(eng.Info()), Path: eng.Info().Path,
		Close: func() { sess.Close(); eng.Close() }}
}

// DescribeModel is the model line of /model: name, architecture, shape,
// context, template, file and device.
func DescribeModel(info engine.Info) string {
	return fmt.Sprintf("%s (%s) · %s · context %d tokens · template: %s · %s · device: %s",
		info.Name, info.Arch, info.Params, info.ContextLen, info.Template, info.Path, info.Device)
}

// Models lists the cache, and the current model first when it is not in it.
func (c *CacheModels) Models() ([]ModelChoice, error) {
	cached, err := hub.List()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	cur := c.cur.Path
	c.mu.Unlock()
	var out []ModelChoice
	found := false
	for _, m := range cached {
		ch := ModelChoice{Name: m.Name, Path: m.Path, Size: m.Size, ModTime: m.ModTime, Current: samePath(m.Path, cur)}
		if st, err := os.Stat(m.Path); err == nil {
			ch.Size = st.Size() // through a symlink
		}
		found = found || ch.Current
		out = append(out, ch)
	}
	if !found && cur != "" {
		ch := ModelChoice{Name: filepath.Base(cur), Path: cur, Current: true}
		if st, err := os.Stat(cur); err == nil {
			ch.Size, ch.ModTime = st.Size(), st.ModTime()
		}
		out = append([]ModelChoice{ch}, out...)
	}
	return out, nil
}

func samePath(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// Load loads model on the chat's device with the chat's options, and the
// KV dtype /kvdtype chose for the current model, if any.
func (c *CacheModels) Load(ctx context.Context, model string, progress func(engine.LoadProgress)) (*LoadedModel, error) {
	o := c.opts
	o.Model = model
	c.mu.Lock()
	if c.cur != nil {
		if now := c.cur.Engine.Stats().KVDType; now != c.kvAtLoad {
			if _, err := kvcache.ParseDType(now); err == nil {
				c.kvChoice = now
			}
		}
	}
	if c.kvChoice != "" {
		o.KVDType, o.KVDTypeK, o.KVDTypeV = c.kvChoice, "", ""
	}
	c.mu.Unlock()
	eng, err := engine.Load(ctx, o, progress)
	if err != nil {
		return nil, err
	}
	return c.loaded(eng, eng.NewSession()), nil
}

// Use closes the current model and keeps lm.
func (c *CacheModels) Use(lm *LoadedModel) {
	c.mu.Lock()
	old := c.cur
	c.cur = lm
	c.kvAtLoad = lm.Engine.Stats().KVDType
	c.mu.Unlock()
	if old != nil && old != lm {
		old.Close()
	}
}

// Close frees the current model (at exit).
func (c *CacheModels) Close() {
	c.mu.Lock()
	cur := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cur != nil {
		cur.Close()
	}
}

// matchModel finds arg in list: its number in the list, its name with or
// without .gguf, or a unique part of the name (case-insensitive). ok is
// false when nothing matches (arg may still be a path or a known name);
// err names the candidates when several match.
func matchModel(list []ModelChoice, arg string) (ModelChoice, bool, error) {
	if n, err := strconv.Atoi(arg); err == nil {
		if n < 1 || n > len(list) {
			return ModelChoice{}, false, fmt.Errorf("no model number %d: /model lists %d", n, len(list))
		}
		return list[n-1], true, nil
	}
	a := strings.ToLower(arg)
	for _, c := range list {
		n := strings.ToLower(c.Name)
		if n == a || strings.TrimSuffix(n, ".gguf") == a {
			return c, true, nil
		}
	}
	for _, part := range []func(n string) bool{
		func(n string) bool { return strings.HasPrefix(n, a) },
		func(n string) bool { return strings.Contains(n, a) },
	} {
		var hits []ModelChoice
		for _, c := range list {
			if part(strings.ToLower(c.Name)) {
				hits = append(hits, c)
			}
		}
		switch {
		case len(hits) == 1:
			return hits[0], true, nil
		case len(hits) > 1:
			var names []string
			for _, h := range hits {
				names = append(names, h.Name)
			}
			return ModelChoice{}, false, fmt.Errorf("%q matches %s: give more of the name", arg, strings.Join(names, ", "))
		}
	}
	return ModelChoice{}, false, nil
}

// ---- the chat side ----------------------------------------------------------

// modelSwap is a /model switch in progress.
type modelSwap struct {
	name, from string
	prefill    bool // the model is switched; its KV cache is being built
	stage      string
	done       int64
	total      int64
	cancelled  bool
	link       *swapLink
	cancel     context.CancelFunc
}

// swapLink carries a switch's progress and result from its goroutine: the
// latest progress is kept and signalled (the UI reads the newest, none is
// lost to throttling), the result is sent once per phase.
type swapLink struct {
	mu          sync.Mutex
	stage       string
	done, total int64
	notify      chan struct{}
	result      chan tea.Msg
}

func newSwapLink() *swapLink {
	return &swapLink{notify: make(chan struct{}, 1), result: make(chan tea.Msg, 1)}
}

func (l *swapLink) report(stage string, done, total int64) {
	l.mu.Lock()
	l.stage, l.done, l.total = stage, done, total
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default: // a signal is pending: the UI reads the newest values
	}
}

func (l *swapLink) next() tea.Msg {
	select {
	case <-l.notify:
		l.mu.Lock()
		defer l.mu.Unlock()
		return swapProgMsg{l.stage, l.done, l.total}
	case msg := <-l.result:
		return msg
	}
}

type (
	swapProgMsg struct {
		stage       string
		done, total int64
	}
	swapLoadedMsg struct {
		lm  *LoadedModel
		err error
	}
	swapPrefilledMsg struct{ err error }
)

// modelList is the cache listing for /model, Tab and the menu; it is
// read again when older than a few seconds.
func (m *model) modelList() []ModelChoice {
	if m.cfg.Models == nil {
		return nil
	}
	if m.models.list == nil || time.Since(m.models.at) > 5*time.Second {
		list, err := m.cfg.Models.Models()
		if err != nil {
			m.models.err = err
		}
		m.models.list, m.models.at = list, time.Now()
		if m.models.list == nil {
			m.models.list = []ModelChoice{}
		}
	}
	return m.models.list
}

// modelCommand is /model: describe the model and list the others, or
// switch to one.
func (m *model) modelCommand(arg string) tea.Cmd {
	if arg == "" {
		m.models.list = nil // read the cache again
		m.addInfo(m.modelInfo())
		return nil
	}
	if m.cfg.Models == nil && m.stats.Remote != "" {
		m.addError(fmt.Sprintf("/model: a remote engine's model is chosen at start: ftchat --engine %s --remote-model %s", m.stats.Remote, arg))
		return nil
	}
	if m.cfg.Models == nil {
		m.addError(fmt.Sprintf("/model: switching models needs a restart: ftchat --model %s", arg))
		return nil
	}
	if m.ag != nil {
		m.addError(fmt.Sprintf("/model %s: the agent keeps its model; restart with ftchat --agent --model %s", arg, arg))
		return nil
	}
	if m.reconf != nil {
		m.addError("/model: the KV cache is switching to " + m.reconf.dtype + "; wait for it, or Esc cancels it")
		return nil
	}
	if m.swap != nil {
		m.addError("/model: already switching to " + m.swap.name + "; Esc cancels it")
		return nil
	}
	m.models.list = nil
	list := m.modelList()
	if m.models.err != nil {
		m.addError("/model: reading the model cache: " + m.models.err.Error())
		m.models.err = nil
		return nil
	}
	choice, ok, err := matchModel(list, arg)
	if err != nil {
		m.addError("/model: " + err.Error())
		return nil
	}
	target, name := arg, arg
	if ok {
		if choice.Current {
			m.addInfo("/model: " + choice.Name + " is the model in use")
			return nil
		}
		target, name = choice.Path, strings.TrimSuffix(choice.Name, ".gguf")
	}
	return m.startSwap(target, name)
}

func (m *model) startSwap(target, name string) tea.Cmd {
	ctx, cancel := context.WithCancel(m.ctx)
	link := newSwapLink()
	m.swap = &modelSwap{name: name, from: m.stats.Model, link: link, cancel: cancel, stage: "loading"}
	src := m.cfg.Models
	req := m.request()
	go func() {
		lm, err := src.Load(ctx, target, func(p engine.LoadProgress) { link.report(p.Stage, p.Done, p.Total) })
		if err == nil && ctx.Err() != nil {
			lm.Close() // loaded after Esc: keep the old model
			lm, err = nil, ctx.Err()
		}
		if err == nil && len(req.Messages) > 0 {
			if ferr := lm.Engine.FitCheck(req); ferr != nil {
				lm.Close()
				lm, err = nil, fmt.Errorf("the conversation does not fit it: %w; /drop or /compact some turns first, or /clear", ferr)
			}
		}
		link.result <- swapLoadedMsg{lm, err}
	}()
	m.addInfo(fmt.Sprintf("loading %s · Esc cancels, keeping %s", name, m.swap.from))
	return m.listenSwap()
}

func (m *model) listenSwap() tea.Cmd {
	if m.swap == nil {
		return nil
	}
	return m.swap.link.next
}

// cancelSwap is Esc during a switch.
func (m *model) cancelSwap() {
	if m.swap == nil || m.swap.cancelled {
		return
	}
	m.swap.cancelled = true
	m.swap.cancel()
}

// swapUpdate handles the switch's messages; ok is false for other ones.
func (m *model) swapUpdate(msg tea.Msg) (tea.Cmd, bool) {
	switch msg := msg.(type) {
	case swapProgMsg:
		if m.swap != nil {
			m.swap.stage, m.swap.done, m.swap.total = msg.stage, msg.done, msg.total
		}
		return m.listenSwap(), true
	case swapLoadedMsg:
		return m.onSwapLoaded(msg), true
	case swapPrefilledMsg:
		return m.onSwapPrefilled(msg), true
	}
	return nil, false
}

func (m *model) onSwapLoaded(msg swapLoadedMsg) tea.Cmd {
	sw := m.swap
	if sw == nil {
		return nil
	}
	m.scrollBottom()
	if msg.err != nil {
		m.swap = nil
		if sw.cancelled || errors.Is(msg.err, context.Canceled) {
			m.addInfo(fmt.Sprintf("/model %s cancelled; still on %s", sw.name, sw.from))
		} else {
			m.addError(fmt.Sprintf("/model %s failed, still on %s: %v", sw.name, sw.from, msg.err))
		}
		return m.afterSwap()
	}
	// Earlier answers keep the name of the model that wrote them.
	for _, e := range m.entries {
		if e.kind == entryAssistant && e.label == "" {
			e.label, e.valid = m.r.label, false
		}
	}
	lm := msg.lm
	m.eng, m.sess = lm.Engine, lm.Session
	m.drop = nil // an offer to drop turns was for the old model's pool
	m.cfg.ModelInfo = lm.Info
	m.cfg.Models.Use(lm)
	m.models.list = nil
	m.stats = m.eng.Stats()
	m.r = m.newRenderer(m.width, m.style)
	if m.piped != "" {
		m.pipedTokens = m.eng.CountTokens(m.piped)
	}
	m.unsaved = true // the session file names the model
	p, ok := m.sess.(prefiller)
	if len(m.msgs) == 0 || !ok {
		m.swap = nil
		m.addInfo(fmt.Sprintf("now on %s (was %s)", m.stats.Model, sw.from))
		return m.afterSwap()
	}
	m.addInfo(fmt.Sprintf("now on %s (was %s); prefilling the conversation (%d messages) with its tokenizer · Esc leaves the rest to your next message",
		m.stats.Model, sw.from, len(m.msgs)))
	ctx, cancel := context.WithCancel(m.ctx)
	sw.prefill, sw.cancel, sw.cancelled = true, cancel, false
	sw.stage, sw.done, sw.total = "prefill", 0, 0
	link, req := sw.link, m.request()
	go func() {
		defer cancel()
		err := p.Prefill(ctx, req, func(done, total int) { link.report("prefill", int64(done), int64(total)) })
		link.result <- swapPrefilledMsg{err}
	}()
	return m.listenSwap()
}

func (m *model) onSwapPrefilled(msg swapPrefilledMsg) tea.Cmd {
	sw := m.swap
	m.swap = nil
	if sw == nil {
		return nil
	}
	m.stats = m.eng.Stats()
	m.scrollBottom()
	switch {
	case msg.err != nil && (sw.cancelled || errors.Is(msg.err, context.Canceled)):
		m.addInfo(fmt.Sprintf("prefill stopped at %s of %s tokens; your next message prefills the rest",
			formatInt(sw.done), formatInt(sw.total)))
	case msg.err != nil:
		m.addError(fmt.Sprintf("prefilling the conversation on %s: %v; your next message tries again", m.stats.Model, msg.err))
	default:
		m.addInfo(fmt.Sprintf("%s holds the conversation: %s tokens in its KV cache", m.stats.Model, formatInt(int64(m.stats.TokensUsed))))
	}
	return m.afterSwap()
}

// afterSwap sends a message typed during the switch.
func (m *model) afterSwap() tea.Cmd {
	if q := m.queued; q != "" {
		m.queued = ""
		return m.submit(q)
	}
	return nil
}

// swapNotice is the notice line during a switch.
func (m *model) swapNotice() string {
	sw := m.swap
	queued := ""
	if m.queued != "" {
		queued = " · message queued"
	}
	if sw.cancelled {
		if sw.prefill {
			return "stopping the prefill…" + queued
		}
		return "cancelling, keeping " + sw.from + "…" + queued
	}
	frac := 0.0
	if sw.total > 0 {
		frac = float64(sw.done) / float64(sw.total)
	}
	if sw.prefill {
		return fmt.Sprintf("%s: prefill %s %s / %s tokens%s · esc stops", sw.name, bar(frac, 12),
			formatInt(sw.done), formatInt(sw.total), queued)
	}
	amount := ""
	if sw.total > 0 {
		amount = fmt.Sprintf(" %s %d%% of %s", bar(frac, 12), int(frac*100), formatBytes(sw.total))
	}
	return fmt.Sprintf("→ %s: %s%s%s · esc cancels", sw.name, stageVerb(sw.stage), amount, queued)
}

// stageVerb is a load stage without its file path ("reading /x/y.gguf":
// "reading"; the name is shown already).
func stageVerb(s string) string {
	if verb, rest, ok := strings.Cut(s, " "); ok && strings.ContainsAny(rest, `/\`) {
		return verb
	}
	return s
}

// modelListText lists the models for /model, numbered.
func (m *model) modelListText() string {
	list := m.modelList()
	if m.models.err != nil {
		err := m.models.err
		m.models.err = nil
		return "models: the cache cannot be read: " + err.Error()
	}
	if len(list) <= 1 {
		return "other models: none in the cache (ftchat pull NAME fetches one; /model PATH loads a file)"
	}
	var b strings.Builder
	b.WriteString("models (/model N or NAME switches, keeping the conversation):")
	for i, c := range list {
		mark := " "
		if c.Current {
			mark = "*"
		}
		fmt.Fprintf(&b, "\n %s %d  %-44s %9s  %s", mark, i+1, c.Name, formatBytes(c.Size), c.ModTime.Format(time.DateOnly))
	}
	return b.String()
}

// modelMenuItems are the menu rows while "/model " is typed: the cached
// models whose names hold what follows.
func (m *model) modelMenuItems(v string) []command {
	arg, ok := strings.CutPrefix(v, "/model ")
	if !ok || strings.Contains(arg, "\n") || m.cfg.Models == nil || m.ag != nil {
		return nil
	}
	arg = strings.ToLower(strings.TrimSpace(arg))
	if _, err := strconv.Atoi(arg); err == nil {
		return nil // a number from /model's list: Enter runs it as typed
	}
	var out []command
	for _, c := range m.modelList() {
		if !strings.Contains(strings.ToLower(c.Name), arg) {
			continue
		}
		help := formatBytes(c.Size)
		if c.Current {
			help += " · in use"
		}
		out = append(out, command{name: "/model " + strings.TrimSuffix(c.Name, ".gguf"), help: help})
	}
	if len(out) == 1 && out[0].name == strings.TrimRight(v, " ") {
		return nil
	}
	return out
}

// modelNames are Tab's completions after "/model ".
func (m *model) modelNames() []string {
	var out []string
	for _, c := range m.modelList() {
		out = append(out, strings.TrimSuffix(c.Name, ".gguf"))
	}
	return out
}
