package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/quality"
)

// evalText is ordinary English prose (written for this test) of about 150
// SmolLM2 tokens.
const evalText = `The river rose slowly through the night, and by morning the lower fields were under water. ` +
	`Farmers moved their animals to the hill behind the church, where the ground was dry and the grass was still green. ` +
	`Nobody in the village could remember a flood like it, although the oldest woman said her mother had spoken of one. ` +
	`By noon the rain had stopped, the clouds had broken up, and the children were sailing paper boats in the street. ` +
	`In the evening the water began to fall again, leaving mud, broken fences and a smell of wet earth that lasted for weeks.`

func TestEvalQualityReferenceAndFP8(t *testing.T) {
	e := load(t, Options{KVTokens: 256})
	toks := e.EncodeText(evalText)
	if len(toks) < 100 {
		t.Fatalf("test text is %d tokens; want at least 100", len(toks))
	}
	bf16, _ := e.KVSpecFor("bf16", "")
	e4, _ := e.KVSpecFor("fp8_e4m3", "")
	e5, _ := e.KVSpecFor("fp8_e5m2", "")
	res, err := e.EvalQuality(context.Background(), toks, 96, 48, bf16, []KVSpec{bf16, e4, e5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := res[0]
	if same.Tokens != len(toks)-1 {
		t.Errorf("scored %d tokens of %d; want every token but the first", same.Tokens, len(toks))
	}
	// The same cache on the same windows must reproduce the logits bit for bit.
	if same.KLDMean != 0 || same.KLDMax != 0 || same.Top1Agreement != 1 || same.PPL != same.PPLRef {
		t.Errorf("bf16 vs bf16: %+v; want KLD exactly 0, agreement exactly 1, equal perplexity", same)
	}
	if !(same.PPLRef > 1 && same.PPLRef < 100) {
		t.Errorf("reference perplexity %v on plain English; want between 1 and 100", same.PPLRef)
	}
	for i, name := range []string{"fp8_e4m3", "fp8_e5m2"} {
		r := res[i+1]
		if !(r.KLDMean > 0 && r.KLDMean < 0.2) || r.Top1Agreement < 0.8 || r.Top1Agreement > 1 {
			t.Errorf("%s: KLD %v, top-1 agreement %v; want a small positive KLD and agreement >= 0.8", name, r.KLDMean, r.Top1Agreement)
		}
		if r.PPLRef != same.PPLRef {
			t.Errorf("%s: reference perplexity %v differs from the bf16 run's %v", name, r.PPLRef, same.PPLRef)
		}
	}
	// E5M2 keeps 2 mantissa bits against E4M3's 3: it must not be closer.
	if res[2].KLDMean <= res[1].KLDMean {
		t.Errorf("fp8_e5m2 KLD %v <= fp8_e4m3 KLD %v", res[2].KLDMean, res[1].KLDMean)
	}

	// The engine's own pool is back and usable.
	s := e.NewSession()
	defer s.Close()
	if out, _ := collect(t, s.Generate(context.Background(), greedy(4, Message{Role: "user", Content: "Hi"}))); out == "" {
		t.Error("no answer after evaluation")
	}
}

func TestEvalGreedyMatchesGenerate(t *testing.T) {
	e := load(t, Options{KVTokens: 256})
	msgs := []Message{{Role: "user", Content: "What is the capital of France?"}}
	prompt, err := e.EncodeChat(msgs)
	if err != nil {
		t.Fatal(err)
	}
	bf16, _ := e.KVSpecFor("auto", "")
	ids, err := e.EvalGreedy(context.Background(), bf16, prompt, 12)
	if err != nil {
		t.Fatal(err)
	}
	s := e.NewSession()
	defer s.Close()
	want, _ := collect(t, s.Generate(context.Background(), greedy(12, msgs...)))
	if got := e.Tokenizer().Decode(ids); got != want {
		t.Errorf("EvalGreedy %q, Generate %q; want the same greedy answer", got, want)
	}
	// With a conversation in the pool, evaluation refuses instead of wiping it.
	if _, err := e.EvalGreedy(context.Background(), bf16, prompt, 1); err == nil || !strings.Contains(err.Error(), "hold no tokens") {
		t.Errorf("evaluation with a live conversation: %v; want a refusal", err)
	}
}

func TestCalibrateWindowStaticScales(t *testing.T) {
	e := load(t, Options{KVTokens: 256})
	toks := e.EncodeText(evalText)
	l, h, d := e.AttnShape()
	cal, err := kvcache.NewCalibrator(l, h, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CalibrateWindow(context.Background(), toks[:64], cal); err != nil {
		t.Fatal(err)
	}
	if cal.Tokens() != 64 {
		t.Fatalf("calibrator saw %d tokens, want 64", cal.Tokens())
	}
	sf, err := cal.Scales("test", kvcache.FP8E4M3, kvcache.CalibOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/scales.json"
	if err := sf.Save(path); err != nil {
		t.Fatal(err)
	}
	static, err := e.KVSpecFor("fp8_e4m3", path)
	if err != nil {
		t.Fatal(err)
	}
	if static.ScaleMode() != "static" || static.String() != "fp8_e4m3 (static scales)" {
		t.Errorf("spec %q mode %q", static, static.ScaleMode())
	}
	bf16, _ := e.KVSpecFor("bf16", "")
	// Evaluate on the tokens after the calibration sample.
	res, err := e.EvalQuality(context.Background(), toks[64:], 64, 32, bf16, []KVSpec{static}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; !(r.KLDMean > 0 && r.KLDMean < 0.5) || r.Top1Agreement < 0.7 {
		t.Errorf("static scales: KLD %v, agreement %v; want small positive KLD, agreement >= 0.7", r.KLDMean, r.Top1Agreement)
	}
	if _, err := e.KVSpecFor("bf16", path); err == nil {
		t.Error("static scales with bf16 accepted")
	}
}

func TestEvalNeedleShort(t *testing.T) {
	e := load(t, Options{KVTokens: 256})
	bf16, _ := e.KVSpecFor("bf16", "")
	res, err := e.EvalNeedle(context.Background(), NeedleConfig{Filler: evalText, Lengths: []int{200}, Depths: []float64{0.5}, Seed: 3, MaxTokens: 16},
		[]KVSpec{bf16}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d results, want 1", len(res))
	}
	r := res[0]
	if r.PromptTokens < 200 || r.ActualDepth < 0.3 || r.ActualDepth > 0.7 || r.Passphrase == "" || r.KV != "bf16" {
		t.Errorf("needle result %+v", r)
	}
	// Greedy decoding is deterministic: with this seed SmolLM2 answers with
	// the passphrase's digits (it drops the word, so Found is false), which
	// shows the needle reached the model through the template.
	_, digits, _ := strings.Cut(r.Passphrase, "-")
	if !strings.Contains(r.Answer, digits) || r.Found != quality.Found(r.Answer, r.Passphrase) {
		t.Errorf("bf16 on a 200-token haystack: answer %q for passphrase %q (found=%v)", r.Answer, r.Passphrase, r.Found)
	}
	if _, err := e.EvalNeedle(context.Background(), NeedleConfig{Filler: evalText, Lengths: []int{2 * e.Info().ContextLen}, Depths: []float64{0.5}},
		[]KVSpec{bf16}, nil); err == nil || !strings.Contains(err.Error(), "context") {
		t.Errorf("haystack as long as the context: %v; want an error naming the context", err)
	}
}
