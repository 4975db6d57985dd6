// Prints llama.cpp logits (float32 LE, n_vocab per row) for a token list: every position of
// one batch (prefill) or one token per llama_decode call (decode), CPU only. Used by
// scripts/llamacpp_fixture_compare.py to check engine/model/testdata/tiny_qwen3*.gguf against
// the transformers references. Build against a llama.cpp CPU build (BUILD_SHARED_LIBS=OFF):
//   g++ -O2 -std=c++17 -I$LC/include -I$LC/ggml/include scripts/llamacpp_fixture_logits.cpp \
//     $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \
//     -fopenmp -lpthread -ldl -o /tmp/lcplogits
#include "llama.h"
#include <cstdio>
#include <string>
#include <cstdlib>
#include <vector>
int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: model.gguf mode(prefill|decode) ids...\n"); return 2; }
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    bool decode = std::string(argv[2]) == "decode";
    std::vector<llama_token> ids;
    for (int i = 3; i < argc; i++) ids.push_back(atoi(argv[i]));
    auto cp = llama_context_default_params();
    cp.n_ctx = 1024; cp.n_batch = 1024; cp.n_ubatch = 1024; cp.n_threads = 2; cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (!decode) {
        llama_batch b = llama_batch_init(ids.size(), 0, 1);
        for (size_t i = 0; i < ids.size(); i++) {
            b.token[i] = ids[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
        }
        b.n_tokens = ids.size();
        if (llama_decode(ctx, b)) return 3;
        for (size_t i = 0; i < ids.size(); i++) fwrite(llama_get_logits_ith(ctx, i), 4, nv, stdout);
    } else {
        llama_batch b = llama_batch_init(1, 0, 1);
        for (size_t i = 0; i < ids.size(); i++) {
            b.token[0] = ids[i]; b.pos[0] = i; b.n_seq_id[0] = 1; b.seq_id[0][0] = 0; b.logits[0] = 1; b.n_tokens = 1;
            if (llama_decode(ctx, b)) return 3;
            fwrite(llama_get_logits_ith(ctx, 0), 4, nv, stdout);
        }
    }
    llama_free(ctx); llama_model_free(model);
    return 0;
}
