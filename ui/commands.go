package ui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/engine/kvcache"
)

type command struct {
	name, args, help string
}

var commands = []command{
	{"/help", "", "show this help"},
	{"/kvdtype", "<dtype>", "switch the live KV cache dtype: " + strings.Join(kvDTypes, ", ")},
	{"/clear", "", "start over: drop the conversation and its cached tokens"},
	{"/drop", "[n]", "drop the oldest n turns (default: what a refused message needs), keeping the system prompt"},
	{"/compact", "[n]", "replace the oldest n turns by the model's summary of them (default: what a refused message needs, else half)"},
	{"/system", "[text]", "set the system prompt (no text: show it)"},
	{"/set", "[name value]", "change temperature, top_p, max_tokens, seed, system… for the next answers (no args: list them)"},
	{"/model", "[name|n]", "show the model and the cached ones, or switch to one (keeps the conversation)"},
	{"/save", "[name]", "save the conversation (under a name)"},
	{"/load", "<name>", "resume a saved conversation"},
	{"/stats", "", "show all engine statistics"},
	{"/copy", "[-k] [n|code]", "copy the last answer (-k: the k-th from the end), its code block n, or its last code block"},
	{"/quit", "", "quit (also Ctrl+D, or Ctrl+C twice)"},
}

func helpText() string {
	var b strings.Builder
	b.WriteString("commands (Tab completes):\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-20s %s\n", c.name+" "+c.args, c.help)
	}
	b.WriteString("keys: Enter send · Ctrl+J/Shift+Enter newline · Up/Down history · Esc/Ctrl+C stop answer\n")
	b.WriteString("      PgUp/PgDn, wheel scroll · Home/End (empty input) or Ctrl+Home/End top/bottom · Ctrl+T thinking")
	return b.String()
}

// command runs one slash command line. Errors are one line in the chat.
func (m *model) command(line string) tea.Cmd {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	m.setNotice("", false)
	if m.gen != nil && name != "/quit" && name != "/help" && name != "/stats" {
		m.setNotice("still answering: wait, or press Esc to stop it, before "+name, true)
		return nil
	}
	if m.reconf != nil && !contains([]string{"/quit", "/exit", "/help", "/stats", "/model", "/copy", "/kvdtype"}, name) {
		m.setNotice("the KV cache is switching to "+m.reconf.dtype+": wait, or press Esc to cancel it, before "+name, true)
		m.setInput(line)
		return nil
	}
	if m.swap != nil && !contains([]string{"/quit", "/exit", "/help", "/stats", "/copy", "/model"}, name) {
		m.setNotice("switching to "+m.swap.name+": wait, or press Esc, before "+name, true)
		m.setInput(line)
		return nil
	}
	noArgs := func() bool {
		if arg != "" {
			m.addError(fmt.Sprintf("%s takes no arguments (got %q)", name, arg))
			return false
		}
		return true
	}
	defer m.scrollBottom()
	if why, ok := agentDisabled[name]; ok && m.ag != nil {
		m.addError(fmt.Sprintf("%s is not available in agent mode: %s", name, why))
		return nil
	}
	switch name {
	case "/help":
		m.addInfo(helpText())
	case "/quit", "/exit":
		return m.quit()
	case "/clear":
		if !noArgs() {
			return nil
		}
		if m.reconf != nil {
			m.addError("/clear: the KV cache is being reconfigured; wait for it to finish")
			return nil
		}
		m.sess.Reset()
		if m.ag != nil {
			m.ag.runner.Reset()
		}
		m.msgs = nil
		m.entries = nil
		m.piped = ""
		m.drop = nil
		m.sessName, m.created = newSessionName(time.Now()), time.Time{}
		m.unsaved, m.snapSeq = false, 0
		m.stats = m.eng.Stats()
		if m.ag != nil {
			m.addInfo("conversation cleared (the agent's and the KV cache's); new session " + m.sessName + "; \"allow for this session\" approvals are kept")
		} else {
			m.addInfo("conversation cleared; new session " + m.sessName)
		}
	case "/system":
		if arg == "" {
			if m.system == "" {
				m.addInfo("no system prompt set; /system <text> sets one")
			} else {
				m.addInfo("system prompt: " + m.system)
			}
			return nil
		}
		m.system = arg
		m.unsaved = true
		m.addInfo("system prompt set; it applies from the next message")
	case "/model":
		return m.modelCommand(arg)
	case "/stats":
		if !noArgs() {
			return nil
		}
		m.stats = m.eng.Stats()
		m.addInfo(statsTable(m.stats) + "\n\nsampling (/set changes them):\n" + m.settingsTable())
	case "/kvdtype":
		return m.startReconf(arg)
	case "/save":
		if arg != "" {
			if err := checkName(arg); err != nil {
				m.addError("/save: " + err.Error())
				return nil
			}
			m.sessName = arg
		}
		f, seq := m.snapshot()
		if err := m.store.Save(f, seq); err != nil {
			m.addError("/save: " + err.Error() + "; the session stays unsaved (saving is retried after the next turn and at exit)")
			return nil
		}
		m.addInfo(fmt.Sprintf("saved as %q in %s", m.sessName, m.store.Dir))
	case "/load":
		if arg == "" {
			names, _ := m.store.List()
			m.addError("/load needs a session name; saved: " + listOrNone(names))
			return nil
		}
		f, err := m.store.Load(arg)
		if err != nil {
			m.addError("/load: " + err.Error())
			return nil
		}
		m.applySession(f)
	case "/drop":
		return m.dropCommand(arg)
	case "/compact":
		return m.compactCommand(arg)
	case "/set":
		m.setCommand(arg)
	case "/copy":
		return m.copyCommand(arg)
	default:
		m.addError(fmt.Sprintf("unknown command %s; /help lists the commands", name))
	}
	return nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 10 {
		names = append(names[:10:10], "…")
	}
	return strings.Join(names, ", ")
}

// modelInfo describes the model from the engine's numbers plus whatever
// the caller passed in Config.ModelInfo.
func (m *model) modelInfo() string {
	s := m.eng.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "model   %s\ndevice  %s\nkv      %s, %s tokens capacity (%s per token)",
		s.Model, s.Device, s.KVDType, formatInt(int64(s.TokensCapacity)), formatBytes(int64(s.BytesPerToken)))
	if s.StateLayers > 0 {
		fmt.Fprintf(&b, "\nstate   %s per sequence (%d recurrent layers, float32), %d slots = %s",
			formatBytes(s.StateBytesPerSeq), s.StateLayers, s.StateSlots, formatBytes(s.StateBytes))
	}
	if m.cfg.ModelInfo != "" {
		b.WriteString("\n" + strings.TrimRight(m.cfg.ModelInfo, "\n"))
	}
	switch {
	case s.Remote != "": // the server's other models are in ModelInfo (--remote-model)
	case m.cfg.Models == nil || m.ag != nil:
		b.WriteString("\nother models: restart with ftchat --model <name or path>")
	default:
		b.WriteString("\n" + m.modelListText())
	}
	return b.String()
}

// ---- /kvdtype --------------------------------------------------------------

func (m *model) startReconf(dtype string) tea.Cmd {
	if dtype == "" {
		m.addError("/kvdtype needs a dtype: " + strings.Join(kvDTypes, ", ") + fmt.Sprintf(" (now %s)", m.stats.KVDType))
		return nil
	}
	if !contains(kvDTypes, dtype) {
		if !strings.Contains(dtype, "=") {
			m.addError(fmt.Sprintf("/kvdtype: unknown dtype %q; use one of %s, or k=<dtype> v=<dtype> to store K and V apart", dtype, strings.Join(kvDTypes, ", ")))
			return nil
		}
		// K and V apart ("k=bf16 v=fp8_e4m3"; a half left out keeps its
		// dtype): checked here so a typo never starts a switch.
		if _, _, err := kvcache.ParseDTypePair(dtype, kvcache.BF16, kvcache.BF16); err != nil {
			m.addError("/kvdtype: " + err.Error())
			return nil
		}
	}
	if m.reconf != nil {
		m.addError("/kvdtype: a switch to " + m.reconf.dtype + " is already running")
		return nil
	}
	if f, ok := m.eng.(fixedKV); ok {
		if err := f.KVFixed(); err != nil { // a remote server's cache
			m.addError(err.Error())
			return nil
		}
	}
	before := m.eng.Stats()
	// The engine reports 0 / total first; until then the total is what
	// the pool holds.
	m.reconf = &reconfState{dtype: dtype, total: before.TokensUsed}
	ch := make(chan tea.Msg, 4)
	m.reconfCh = ch
	ctx, cancel := context.WithCancel(m.ctx)
	m.reconfCancel = cancel
	eng := m.eng
	go func() {
		defer cancel()
		var last time.Time
		err := eng.SwitchKV(ctx, dtype, func(done, total int) {
			// Throttle: the engine may report every page.
			if now := time.Now(); done == 0 || done == total || now.Sub(last) >= frameInterval {
				last = now
				select {
				case ch <- reconfProgMsg{done, total}:
				default:
				}
			}
		})
		ch <- reconfDoneMsg{dtype: dtype, err: err}
		close(ch)
	}()
	m.addInfo(fmt.Sprintf("switching the KV cache from %s to %s (%s tokens to move) · Esc cancels, keeping %s",
		before.KVDType, dtype, formatInt(int64(before.TokensUsed)), before.KVDType))
	return m.listenReconf()
}

// cancelReconf asks the running /kvdtype switch to stop; the engine keeps
// the old cache.
func (m *model) cancelReconf() {
	if m.reconf == nil || m.reconf.cancelled {
		return
	}
	m.reconf.cancelled = true
	m.reconfCancel()
}

// queueDuringReconf keeps a message typed while the KV cache switches; it
// is sent when the switch ends.
func (m *model) queueDuringReconf(v string) {
	if m.queued != "" {
		m.setNotice("a message is already queued for after the switch; Esc cancels the switch", true)
		return
	}
	m.input.Reset()
	m.pushHistory(v)
	m.queued = v
	m.setNotice("", false)
}

func (m *model) listenReconf() tea.Cmd {
	ch := m.reconfCh
	if ch == nil {
		return nil
	}
	return func() tea.Msg {
		msg, ok := <-ch
		if !ok {
			return nil
		}
		return msg
	}
}

func (m *model) onReconfDone(msg reconfDoneMsg) tea.Cmd {
	cancelled := m.reconf != nil && m.reconf.cancelled
	m.reconf, m.reconfCh, m.reconfCancel = nil, nil, nil
	prev := m.stats
	m.stats = m.eng.Stats()
	m.scrollBottom()
	switch {
	case msg.err != nil && (cancelled || errors.Is(msg.err, context.Canceled)):
		m.addInfo(fmt.Sprintf("/kvdtype %s cancelled; the KV cache is %s as before (%s tokens kept)",
			msg.dtype, m.stats.KVDType, formatInt(int64(m.stats.TokensUsed))))
	case msg.err != nil:
		// The engine's message names the numbers; say what command it
		// answers and that nothing changed, without repeating either.
		text := msg.err.Error()
		if !strings.HasPrefix(text, "/kvdtype") {
			text = "/kvdtype " + msg.dtype + " refused: " + text
		}
		if !strings.Contains(text, "nothing changed") {
			text += "; nothing changed"
		}
		m.addError(text)
	default:
		m.drop = nil // an offer to drop turns was for the old pool's capacity
		s := m.stats
		m.addInfo(fmt.Sprintf("KV cache is now %s: capacity %s → %s tokens, conversation %s tokens kept (%s → %s)",
			s.KVDType, formatInt(int64(prev.TokensCapacity)), formatInt(int64(s.TokensCapacity)),
			formatInt(int64(s.TokensUsed)), formatBytes(prev.BytesUsed), formatBytes(s.BytesUsed)))
	}
	if q := m.queued; q != "" {
		m.queued = ""
		return m.submit(q)
	}
	return nil
}

// ---- sessions --------------------------------------------------------------

func (m *model) nextSeq() uint64 { m.saveSeq++; return m.saveSeq }

// snapshot takes the session file to save and its sequence number. The
// session counts as saved only once the store has written that sequence
// (see needsSave), so a save that fails or never finishes keeps it dirty.
func (m *model) snapshot() (*SessionFile, uint64) {
	f, seq := m.sessionFile(), m.nextSeq()
	m.snapSeq, m.unsaved = seq, false
	return f, seq
}

// needsSave reports whether the conversation on screen is not known to be
// in its session file: changed since the last snapshot, the snapshot not
// written (failed, or still in flight), or the file gone.
func (m *model) needsSave() bool {
	if m.unsaved || m.store.savedThrough(m.sessName) < m.snapSeq {
		return true
	}
	_, err := os.Stat(m.store.path(m.sessName))
	return err != nil
}

func (m *model) sessionFile() *SessionFile {
	now := time.Now().UTC()
	if m.created.IsZero() {
		m.created = now
	}
	return &SessionFile{
		Name:     m.sessName,
		Created:  m.created,
		Updated:  now,
		Model:    m.stats.Model,
		KVDType:  m.stats.KVDType,
		Mode:     m.sessionMode(),
		Messages: m.conversation(),
	}
}

func (m *model) sessionMode() string {
	if m.ag != nil {
		return "agent"
	}
	return ""
}

// autosave saves the conversation after each turn, off the UI goroutine.
func (m *model) autosave() tea.Cmd {
	if len(m.msgs) == 0 || m.cfg.NoSave {
		return nil
	}
	f, seq := m.snapshot()
	st := m.store
	return func() tea.Msg {
		return savedMsg{name: f.Name, err: st.Save(f, seq)}
	}
}

// applySession replaces the conversation with a saved one.
func (m *model) applySession(f *SessionFile) {
	m.sess.Reset()
	m.msgs = nil
	m.entries = nil
	m.system = ""
	for _, msg := range f.Messages {
		switch msg.Role {
		case "system":
			m.system = msg.Content
			continue
		case "user":
			e := &entry{kind: entryUser, text: msg.Content}
			if prompt, n, ok := splitContext(msg.Content); ok {
				e.text = prompt
				e.attached = fmt.Sprintf("+ stdin context: %s %s", formatInt(int64(n)), plural(n, "line", "lines"))
			}
			m.addEntry(e)
			m.pushHistory(e.text)
		case "assistant":
			m.addEntry(&entry{kind: entryAssistant, text: msg.Content, think: msg.Reasoning})
		}
		m.msgs = append(m.msgs, msg)
	}
	m.histDraft = ""
	m.sessName, m.created = f.Name, f.Created
	m.unsaved, m.snapSeq = false, 0 // it is the file just read
	m.scrollBottom()
	m.addInfo(fmt.Sprintf("resumed session %q (%d messages); the next message re-prefills it", f.Name, len(m.msgs)))
	if m.ag != nil {
		m.restoreAgent()
	}
}

func (m *model) resumeLatest() {
	name, err := m.store.Latest()
	if err != nil {
		m.addError(err.Error())
		return
	}
	if name == "" {
		m.addInfo("no saved session to continue; starting a new one")
		return
	}
	f, err := m.store.Load(name)
	if err != nil {
		m.addError("--continue: " + err.Error())
		return
	}
	m.applySession(f)
}

// ---- completion --------------------------------------------------------------

// complete completes the command name or its argument in place; with
// several candidates it extends to their common prefix and lists them.
func (m *model) complete() {
	v := m.input.Value()
	if !strings.HasPrefix(v, "/") || strings.Contains(v, "\n") {
		return
	}
	name, arg, hasArg := strings.Cut(v, " ")
	var cands []string
	prefix := name
	if !hasArg {
		for _, c := range commands {
			if strings.HasPrefix(c.name, name) {
				cands = append(cands, c.name)
			}
		}
	} else {
		prefix = strings.TrimLeft(arg, " ")
		var pool []string
		switch name {
		case "/kvdtype":
			pool = kvDTypes
		case "/load":
			pool, _ = m.store.List()
		case "/set":
			pool = settingNames()
		case "/model":
			pool = m.modelNames()
		}
		for _, p := range pool {
			if strings.HasPrefix(p, prefix) {
				cands = append(cands, p)
			}
		}
	}
	switch len(cands) {
	case 0:
		m.setNotice("no completion for "+strings.TrimSpace(v), true)
		return
	case 1:
		if hasArg {
			m.input.SetValue(name + " " + cands[0])
		} else {
			m.input.SetValue(cands[0] + " ")
		}
		m.input.MoveToEnd()
		m.setNotice("", false)
		return
	}
	sort.Strings(cands)
	cp := commonPrefix(cands)
	if len(cp) > len(prefix) {
		if hasArg {
			m.input.SetValue(name + " " + cp)
		} else {
			m.input.SetValue(cp)
		}
		m.input.MoveToEnd()
	}
	m.setNotice(strings.Join(cands, "  "), false)
}

func commonPrefix(ss []string) string {
	p := ss[0]
	for _, s := range ss[1:] {
		for !strings.HasPrefix(s, p) {
			p = p[:len(p)-1]
		}
	}
	return p
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// ---- /copy -------------------------------------------------------------------
