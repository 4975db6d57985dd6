package ui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textarea"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/ftchat/ftchat/engine"
)

// maxInputLines is the bubbles textarea's fixed line limit.
const maxInputLines = 10000

// frameInterval batches streamed tokens into about 30 renders per second.
const frameInterval = time.Second / 30

// Messages the model receives besides Bubble Tea's own.
type (
	// eventsMsg carries the engine events that were ready at once.
	eventsMsg struct {
		id     int
		events []engine.Event
		closed bool
	}
	tickMsg       struct{}
	reconfProgMsg struct{ done, total int }
	reconfDoneMsg struct {
		dtype string
		err   error
	}
	savedMsg struct {
		name string
		err  error
	}
	copiedMsg struct {
		how string
		err error
	}
	startMsg struct{}
)

// generation is one Generate call in flight.
type generation struct {
	id       int
	cancel   context.CancelFunc
	ch       <-chan engine.Event
	entry    *entry
	text     strings.Builder
	think    strings.Builder
	dirty    bool
	finished bool // EventDone or EventError seen
	final    bool // EventDone carried the final stats
	stopped  bool // the user cancelled
	userMsg  int  // index in msgs of the user message of this turn
	prefill  [2]int
	compact  *compactJob // /compact: a summary, not a turn
}

// model is the Bubble Tea model of the interactive UI.
type model struct {
	ctx   context.Context
	cfg   Config
	eng   Engine
	sess  Session
	store *Store

	width, height int
	r             *renderer
	style         string // glamour style in use
	st            styles

	entries   []*entry
	msgs      []engine.Message // the conversation sent to the engine
	system    string
	showThink bool

	// scrolling: follow pins the view to the bottom; otherwise the top
	// visible line is line anchorL of entry anchorE's block.
	follow           bool
	anchorE, anchorL int
	newBelow         bool

	input     textarea.Model
	history   []string
	histIdx   int // len(history) when not browsing
	histDraft string

	notice    string
	noticeErr bool
	quitArmed bool
	quitting  bool

	stats  engine.Stats
	gen    *generation // a chat generation, or an agent run (ch nil)
	ag     *agentMode  // agent mode (Config.Agent); nil: chat
	genSeq int

	reconf       *reconfState
	reconfCh     chan tea.Msg
	reconfCancel context.CancelFunc
	queued       string     // a message typed during the switch, sent after it
	swap         *modelSwap // a /model switch in progress
	models       struct {   // the cache listing /model shows (modelList)
		list []ModelChoice
		at   time.Time
		err  error
	}
	drop         *dropOffer
	copying      string // what /copy copies, for its notice
	menuSel      int    // the chosen row of the command menu…
	menuFor      string // …for this input
	menuClosedOn string // the input Esc closed the menu on
	ticking      bool
	ticksSched   int // how many ticks were scheduled (tests)

	piped        string // attached to the first user message, then cleared
	pipedTokens  int
	initialQueue string

	sessName string
	created  time.Time
	saveSeq  uint64
	snapSeq  uint64 // sequence of the latest snapshot handed to the store
	unsaved  bool   // changed since that snapshot

	statusCache struct {
		stats   engine.Stats
		width   int
		prefill [2]int // done, total while a prompt is prefilled
		lines   []string
	}
	// inputRows caches the input's row count (soft wraps included) on
	// its text and width.
	inputRows struct {
		val  string
		w, n int
		ok   bool
	}
	inputCache struct {
		key    inputKey
		ok     bool
		view   string
		cursor *tea.Cursor
	}

	// tick schedules the next frame; replaced in tests.
	tick func() tea.Cmd
	// clip copies to the native clipboard; replaced in tests.
	clip func(string) (string, error)
}

type reconfState struct {
	dtype       string
	done, total int
	cancelled   bool // Esc: the engine keeps the old cache
}

func newModel(ctx context.Context, cfg Config) *model {
	m := &model{
		ctx:       ctx,
		cfg:       cfg,
		eng:       cfg.Engine,
		sess:      cfg.Session,
		store:     &Store{Dir: cfg.SessionDir},
		st:        newStyles(),
		follow:    true,
		system:    cfg.System,
		piped:     cfg.Piped,
		width:     80,
		height:    24,
		clip:      copyNative,
		showThink: cfg.ShowThinking,
	}
	m.tick = func() tea.Cmd { return tea.Tick(frameInterval, func(time.Time) tea.Msg { return tickMsg{} }) }
	m.input = newInput()
	m.stats = m.eng.Stats()
	if m.piped != "" {
		m.pipedTokens = m.eng.CountTokens(m.piped)
	}
	m.initialQueue = cfg.InitialPrompt
	// Render at 80x24 until the terminal reports its size.
	m.style = cfg.glamourStyle()
	m.r = m.newRenderer(m.width, m.style)
	m.resize(cfg.Width, cfg.Height)
	m.sessName = newSessionName(time.Now())
	if cfg.Continue {
		m.resumeLatest()
	}
	if m.piped != "" {
		n := strings.Count(strings.TrimRight(m.piped, "\n"), "\n") + 1
		m.addInfo(fmt.Sprintf("%s: %s %s (%s tokens) will be attached to your first message as context",
			m.cfg.pipedFrom(), formatInt(int64(n)), plural(n, "line", "lines"), formatInt(int64(m.pipedTokens))))
	}
	return m
}

func newInput() textarea.Model {
	ta := textarea.New()
	ta.Prompt = "› "
	ta.Placeholder = "Ask anything · / for commands · Enter sends, Ctrl+J newline"
	ta.ShowLineNumbers = false
	ta.CharLimit = 0
	ta.DynamicHeight = true
	ta.MinHeight = 1
	ta.MaxHeight = 8
	// MaxHeight only limits the visible rows; without this the textarea
	// would refuse input past MaxHeight lines.
	ta.MaxContentHeight = 1 << 30
	ta.SetVirtualCursor(false) // the terminal cursor: no blink ticks while idle
	ta.KeyMap.InsertNewline = key.NewBinding(key.WithKeys("ctrl+j", "shift+enter", "alt+enter"))
	ta.KeyMap.TransposeCharacterBackward = key.NewBinding() // ctrl+t toggles thinking
	ta.KeyMap.DeleteCharacterForward = key.NewBinding(key.WithKeys("delete"))
	ta.KeyMap.PageUp = key.NewBinding()   // pgup/pgdown scroll the chat
	ta.KeyMap.PageDown = key.NewBinding() //
	ta.KeyMap.InputBegin = key.NewBinding(key.WithKeys("alt+<"))
	ta.KeyMap.InputEnd = key.NewBinding(key.WithKeys("alt+>"))
	s := ta.Styles()
	s.Focused.CursorLine = lipgloss.NewStyle()
	s.Focused.Placeholder = lipgloss.NewStyle().Foreground(lipgloss.Color("8"))
	s.Blurred.Placeholder = s.Focused.Placeholder
	ta.SetStyles(s)
	ta.Focus()
	return ta
}

func (m *model) Init() tea.Cmd {
	var cmds []tea.Cmd
	if m.cfg.Style == "" {
		// Pick the light markdown style on light terminals.
		cmds = append(cmds, tea.RequestBackgroundColor)
	}
	if m.initialQueue != "" {
		cmds = append(cmds, func() tea.Msg { return startMsg{} })
	}
	return tea.Batch(cmds...)
}

// setStyle switches the markdown style and invalidates every cached render.
func (m *model) setStyle(style string) {
	if style == m.style {
		return
	}
	m.style = style
	m.r = m.newRenderer(m.width, style)
	for _, e := range m.entries {
		e.valid = false
		e.stableLen, e.stableLines = 0, nil
	}
}

// newRenderer makes the chat's renderer, its answers headed by the model's name.
func (m *model) newRenderer(w int, style string) *renderer {
	r := newRenderer(w, style)
	r.label = m.stats.Model
	if r.label == "" {
		r.label = "assistant"
	}
	return r
}

func (m *model) resize(w, h int) {
	if w <= 0 || h <= 0 {
		return
	}
	if m.r == nil || w != m.width || m.r.width != w {
		m.r = m.newRenderer(w, m.style)
	}
	m.width, m.height = w, h
	m.input.SetWidth(w)
}

// Update implements tea.Model.
func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if m.ag != nil {
		if cmd, ok := m.agentUpdate(msg); ok {
			return m, cmd
		}
	}
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.resize(msg.Width, msg.Height)
		return m, nil
	case tea.BackgroundColorMsg:
		if m.cfg.Style == "" {
			if msg.IsDark() {
				m.setStyle("dark")
			} else {
				m.setStyle("light")
			}
		}
		return m, nil
	case startMsg:
		p := m.initialQueue
		m.initialQueue = ""
		return m, m.submit(p)
	case tea.KeyPressMsg:
		return m, m.key(msg)
	case tea.PasteMsg:
		m.quitArmed = false
		if n := strings.Count(msg.Content, "\n") + m.input.LineCount(); n > maxInputLines {
			// The textarea would drop the lines past its limit silently.
			m.setNotice(fmt.Sprintf("paste not inserted: %s lines, the input holds %s; pipe large text instead: cat file | ftchat \"question\"",
				formatInt(int64(n)), formatInt(maxInputLines)), true)
			return m, nil
		}
		msg.Content = strings.ReplaceAll(msg.Content, "\t", string(tabRune))
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return m, cmd
	case tea.MouseWheelMsg:
		switch msg.Button {
		case tea.MouseWheelUp:
			m.scrollUp(3)
		case tea.MouseWheelDown:
			m.scrollDown(3)
		}
		return m, nil
	case eventsMsg:
		return m, m.onEvents(msg)
	case tickMsg:
		m.ticking = false
		if m.gen == nil {
			return m, nil // idle: the frame clock stops
		}
		m.flushStream()
		return m, m.scheduleTick()
	case reconfProgMsg:
		if m.reconf != nil {
			m.reconf.done, m.reconf.total = msg.done, msg.total
		}
		return m, m.listenReconf()
	case reconfDoneMsg:
		return m, m.onReconfDone(msg)
	case swapProgMsg, swapLoadedMsg, swapPrefilledMsg:
		cmd, _ := m.swapUpdate(msg)
		return m, cmd
	case savedMsg:
		if msg.err != nil {
			m.setNotice(msg.err.Error()+" · the session is unsaved; saving is retried after the next turn and at exit", true)
		}
		return m, nil
	case copiedMsg:
		what := m.copying
		if what == "" {
			what = "copied"
		} else {
			what = "copied " + what
		}
		if msg.err != nil {
			m.setNotice(what+" with OSC 52 only ("+msg.err.Error()+")", false)
		} else {
			m.setNotice(what+" to the clipboard (OSC 52 + "+msg.how+")", false)
		}
		return m, nil
	}
	return m, nil
}

func (m *model) setNotice(s string, isErr bool) { m.notice, m.noticeErr = s, isErr }

func (m *model) key(k tea.KeyPressMsg) tea.Cmd {
	ks := k.Keystroke()
	if ks != "ctrl+c" && m.quitArmed {
		m.quitArmed = false
		m.setNotice("", false)
	}
	if cmd, ok := m.menuKey(ks); ok {
		return cmd
	}
	switch ks {
	case "ctrl+c":
		if m.gen != nil {
			m.cancelGen()
			return nil
		}
		if m.input.Value() != "" {
			m.input.Reset()
			m.histIdx = len(m.history)
			return nil
		}
		if m.quitArmed {
			return m.quit()
		}
		m.quitArmed = true
		m.setNotice("press Ctrl+C again to quit (or Ctrl+D)", false)
		return nil
	case "ctrl+d":
		return m.quit()
	case "esc":
		if m.gen != nil {
			m.cancelGen()
		} else if m.reconf != nil {
			m.cancelReconf()
		} else if m.swap != nil {
			m.cancelSwap()
		} else {
			m.setNotice("", false)
		}
		return nil
	case "enter":
		v := m.inputValue()
		if strings.TrimSpace(v) == "" {
			return nil
		}
		if m.gen != nil && !strings.HasPrefix(strings.TrimSpace(v), "/") {
			m.setNotice("still answering: wait, or press Esc to stop it", true)
			return nil
		}
		if (m.reconf != nil || m.swap != nil) && !strings.HasPrefix(strings.TrimSpace(v), "/") {
			m.queueDuringReconf(v)
			return nil
		}
		if cmd, ok := m.acceptDrop(v); ok {
			m.pushHistory(v)
			return cmd
		}
		if !strings.HasPrefix(strings.TrimSpace(v), "/") {
			m.drop = nil // another message: a new check
		}
		m.input.Reset()
		m.pushHistory(v)
		return m.submit(v)
	case "tab":
		m.complete()
		return nil
	case "ctrl+t":
		m.showThink = !m.showThink
		return nil
	case "pgup":
		m.scrollUp(max(m.chatHeight()-1, 1))
		return nil
	case "pgdown":
		m.scrollDown(max(m.chatHeight()-1, 1))
		return nil
	case "ctrl+home":
		m.scrollTop()
		return nil
	case "ctrl+end":
		m.scrollBottom()
		return nil
	case "home", "end":
		if m.input.Value() == "" {
			if ks == "home" {
				m.scrollTop()
			} else {
				m.scrollBottom()
			}
			return nil
		}
	case "up":
		if m.input.Line() == 0 && m.historyPrev() {
			return nil
		}
	case "down":
		if m.input.Line() == m.input.LineCount()-1 && m.historyNext() {
			return nil
		}
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(k)
	return cmd
}

// tabRune stands for a tab in the textarea, whose sanitizer turns tabs
// into four spaces: a pasted tab must reach the model as a tab (issue 15
// item 6). It is a private-use code point, so no typed or pasted text
// holds it; inputView shows it as tabGlyph.
const (
	tabRune  = '\uE009'
	tabGlyph = "→"
)

// inputValue is the input's text with its tabs restored.
func (m *model) inputValue() string {
	return strings.ReplaceAll(m.input.Value(), string(tabRune), "\t")
}

// setInput sets the input's text, keeping its tabs.
func (m *model) setInput(s string) {
	m.input.SetValue(strings.ReplaceAll(s, "\t", string(tabRune)))
}

func (m *model) pushHistory(v string) {
	if n := len(m.history); n == 0 || m.history[n-1] != v {
		m.history = append(m.history, v)
	}
	m.histIdx = len(m.history)
	m.histDraft = ""
}

func (m *model) historyPrev() bool {
	if m.histIdx == 0 {
		return false
	}
	if m.histIdx == len(m.history) {
		m.histDraft = m.inputValue()
	}
	m.histIdx--
	m.setInput(m.history[m.histIdx])
	m.input.MoveToBegin()
	return true
}

func (m *model) historyNext() bool {
	if m.histIdx >= len(m.history) {
		return false
	}
	m.histIdx++
	if m.histIdx == len(m.history) {
		m.setInput(m.histDraft)
	} else {
		m.setInput(m.history[m.histIdx])
	}
	m.input.MoveToEnd()
	return true
}

func (m *model) quit() tea.Cmd {
	m.abandon()
	m.quitting = true
	return tea.Quit
}

// abandon stops work in flight when the program ends. A turn cut short
// keeps what was answered so far, so the saved conversation stays valid.
func (m *model) abandon() {
	if m.reconfCancel != nil {
		m.reconfCancel()
	}
	if m.swap != nil {
		m.swap.cancel()
	}
	g := m.gen
	if g == nil {
		return
	}
	g.stopped = true
	g.cancel()
	if g.ch != nil {
		go drain(g.ch) // let the engine finish its last send
	}
	m.gen = nil
	if g.compact != nil {
		return // a summary cut short replaces nothing
	}
	m.unsaved = true // the turn ends here, unsaved
	if answer := g.text.String(); strings.TrimSpace(answer) != "" {
		m.msgs = append(m.msgs, engine.Message{Role: "assistant", Content: answer, Reasoning: strings.TrimSpace(g.think.String())})
	} else {
		m.msgs = m.msgs[:g.userMsg]
	}
}

func drain(ch <-chan engine.Event) {
	for range ch {
	}
}

// submit handles one line of input: a slash command or a chat message.
func (m *model) submit(v string) tea.Cmd {
	if t := strings.TrimSpace(v); strings.HasPrefix(t, "/") {
		return m.command(t)
	}
	if m.ag != nil {
		return m.sendAgent(v)
	}
	return m.send(v)
}

func (m *model) addEntry(e *entry) {
	m.entries = append(m.entries, e)
	if !m.follow {
		m.newBelow = true
	}
}

func (m *model) addInfo(s string)  { m.addEntry(&entry{kind: entryInfo, text: s}) }
func (m *model) addError(s string) { m.addEntry(&entry{kind: entryError, text: s}) }

// conversation returns the messages to send, with the system prompt first.
func (m *model) conversation() []engine.Message {
	out := make([]engine.Message, 0, len(m.msgs)+1)
	if m.system != "" {
		out = append(out, engine.Message{Role: "system", Content: m.system})
	}
	return append(out, m.msgs...)
}

func (m *model) request() engine.Request {
	return engine.Request{Messages: m.conversation(), MaxTokens: m.cfg.MaxTokens, Sampling: m.cfg.Sampling}
}

// send starts a generation for a user message.
func (m *model) send(text string) tea.Cmd {
	if m.reconf != nil {
		m.setNotice("the KV cache is being reconfigured; wait for it to finish", true)
		return nil
	}
	if m.swap != nil {
		m.setNotice("switching to "+m.swap.name+": wait, or press Esc, before sending", true)
		return nil
	}
	content := text
	attached := ""
	if m.piped != "" {
		content = attachContext(text, m.piped, m.cfg.PipedFrom)
		attached = fmt.Sprintf("+ %s context: %s tokens", m.cfg.pipedFrom(), formatInt(int64(m.pipedTokens)))
	}
	m.msgs = append(m.msgs, engine.Message{Role: "user", Content: content})
	req := m.request()
	if err := m.eng.FitCheck(req); err != nil {
		m.msgs = m.msgs[:len(m.msgs)-1]
		msg := "not sent: " + err.Error()
		if attached == "" && m.refuseFull(text, content, err) {
			m.setInput(text)
			m.scrollBottom()
			return nil
		}
		if attached != "" {
			msg = fmt.Sprintf("not sent: the piped input (%s tokens) does not fit: %v (/clear drops the piped input)", formatInt(int64(m.pipedTokens)), err)
		}
		m.addError(msg)
		m.setInput(text)
		m.scrollBottom()
		return nil
	}
	m.piped = ""
	m.addEntry(&entry{kind: entryUser, text: text, attached: attached})
	ae := &entry{kind: entryAssistant, streaming: true}
	m.addEntry(ae)
	m.scrollBottom()
	m.setNotice("", false)
	m.unsaved = true

	ctx, cancel := context.WithCancel(m.ctx)
	m.genSeq++
	g := &generation{id: m.genSeq, cancel: cancel, entry: ae, userMsg: len(m.msgs) - 1}
	g.ch = m.sess.Generate(ctx, req)
	m.gen = g
	return tea.Batch(listen(g.id, g.ch), m.scheduleTick())
}

const contextHeader = "\n\nContext (piped from stdin):\n"

// contextHeaderFor heads attached context: piped stdin, or named files.
func contextHeaderFor(from string) string {
	if from == "" || from == "stdin" {
		return contextHeader
	}
	return "\n\nContext (from " + from + "):\n"
}

// splitContext undoes attachContext for display: the prompt and the
// number of lines of attached context.
func splitContext(content string) (prompt string, lines int, ok bool) {
	i := strings.Index(content, "\n\nContext (")
	if i < 0 {
		return content, 0, false
	}
	j := strings.Index(content[i:], "):\n```")
	if j < 0 || strings.Contains(content[i+2:i+j], "\n") {
		return content, 0, false
	}
	body := strings.Trim(content[i+j+len("):\n"):], "`")
	return content[:i], strings.Count(strings.Trim(body, "\n"), "\n") + 1, true
}

// attachContext puts piped or file text after the prompt in a clearly
// delimited block; from names where it came from ("" or "stdin": piped).
func attachContext(prompt, ctx, from string) string {
	fence := "```"
	for strings.Contains(ctx, fence) {
		fence += "`"
	}
	return prompt + contextHeaderFor(from) + fence + "\n" + strings.TrimRight(ctx, "\n") + "\n" + fence
}

// listen waits for the next engine events, taking all that are ready.
func listen(id int, ch <-chan engine.Event) tea.Cmd {
	return func() tea.Msg {
		ev, ok := <-ch
		if !ok {
			return eventsMsg{id: id, closed: true}
		}
		evs := []engine.Event{ev}
		for len(evs) < 1024 {
			select {
			case ev, ok := <-ch:
				if !ok {
					return eventsMsg{id: id, events: evs, closed: true}
				}
				evs = append(evs, ev)
			default:
				return eventsMsg{id: id, events: evs}
			}
		}
		return eventsMsg{id: id, events: evs}
	}
}

func (m *model) scheduleTick() tea.Cmd {
	if m.ticking {
		return nil
	}
	m.ticking = true
	m.ticksSched++
	return m.tick()
}

func (m *model) cancelGen() {
	if m.gen != nil && !m.gen.stopped {
		m.gen.stopped = true
		m.gen.cancel()
		m.setNotice("stopping…", false)
	}
}

func (m *model) onEvents(msg eventsMsg) tea.Cmd {
	g := m.gen
	if g == nil || msg.id != g.id {
		return nil
	}
	for _, ev := range msg.events {
		switch ev.Kind {
		case engine.EventText:
			g.text.WriteString(ev.Text)
			g.dirty = true
		case engine.EventThinking:
			g.think.WriteString(ev.Text)
			g.dirty = true
		case engine.EventStats:
			m.stats = ev.Stats
		case engine.EventProgress:
			g.prefill = [2]int{ev.Done, ev.Total}
		case engine.EventToolCall:
			if ev.ToolCall != nil {
				m.addInfo(fmt.Sprintf("tool call: %s %v", ev.ToolCall.Name, ev.ToolCall.Arguments))
			}
		case engine.EventDone:
			if ev.Stats != (engine.Stats{}) {
				m.stats = ev.Stats
				g.final = true
			}
			g.finished = true
			g.entry.note = stopNote(ev.Stop, ev.Stats)
		case engine.EventError:
			g.finished = true
			if ev.Err != nil {
				m.addError("error: " + ev.Err.Error())
			}
		}
	}
	if msg.closed {
		return m.finishGen()
	}
	return listen(g.id, g.ch)
}

func stopNote(r engine.StopReason, s engine.Stats) string {
	switch r {
	case engine.StopCancelled:
		return "stopped"
	case engine.StopMaxTokens:
		return "stopped: token limit reached"
	case engine.StopPoolFull:
		hint := "/drop the oldest turns, /clear, or /kvdtype fp8_e4m3 to fit more"
		if strings.HasPrefix(s.KVDType, "fp8") {
			hint = "/drop the oldest turns, or /clear to start over"
		}
		return fmt.Sprintf("stopped: the KV pool is full (%s / %s tokens) · %s",
			formatInt(int64(s.TokensUsed)), formatInt(int64(s.TokensCapacity)), hint)
	}
	return ""
}

// flushStream copies the streamed text into the entry and invalidates its
// cached lines; the next frame re-renders only this entry.
func (m *model) flushStream() {
	g := m.gen
	if g == nil || !g.dirty {
		return
	}
	g.entry.text = g.text.String()
	g.entry.think = g.think.String()
	g.entry.valid = false
	g.dirty = false
	if !m.follow {
		m.newBelow = true
	}
}

func (m *model) finishGen() tea.Cmd {
	g := m.gen
	m.flushStream()
	g.entry.streaming = false
	g.entry.valid = false
	if !g.finished {
		g.entry.note = "the engine closed the stream without finishing"
	}
	if g.stopped && g.entry.note == "" {
		g.entry.note = "stopped"
	}
	if g.compact != nil {
		return m.finishCompact(g)
	}
	answer := g.entry.text
	if strings.TrimSpace(answer) == "" {
		// Nothing answered: take the question back out of the conversation
		// so the next request does not hold two user turns in a row.
		m.msgs = m.msgs[:g.userMsg]
		if g.entry.note == "" {
			g.entry.note = "(no answer)"
		}
	} else {
		m.msgs = append(m.msgs, engine.Message{Role: "assistant", Content: answer, Reasoning: strings.TrimSpace(g.think.String())})
	}
	m.gen = nil
	g.cancel()
	// A stopped turn's final event may predate the engine releasing what
	// it never computed: show what the engine holds now the stream closed.
	if !g.final || g.stopped {
		m.stats = m.eng.Stats()
	}
	if g.stopped || m.notice == "stopping…" {
		m.setNotice("stopped", false)
	}
	return m.autosave()
}
