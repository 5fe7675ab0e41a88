/* harness.telemetry._scan: the optional compiled scanner of harness/telemetry/summary.py (docs/spec.md#telemetry).
 *
 * It walks a block of whole lines once, finds the tags, and parses each well-formed ASCII
 * dispatch row's six integers and each setup row's rank, with exact line numbers. Rows it
 * cannot judge alone (malformed, or holding a non-ASCII byte) are handed back as "deferred"
 * (kind, line, start, end, index) entries for the reference Python code to judge, so reasons
 * and edge cases stay those of telemetry.py. Three entry points:
 *   scan(buf, length, first_line, dispatch, setup) -> rows, line numbers (int64 bytes), ...
 *   Folder(warmup).feed(...) folds rows straight into counts, peaks and distinct keys;
 *   sift(buf, length, dispatch, setup, exact, folded) -> the lines the taxonomy must read
 *   (harness.taxonomy.judge: not canonical rows; holding a tag, colour or an anchor), and
 *   Folder.sift_feed(...), the fold and the sift in one pass (`epcap classify`).
 * The GIL is released while a block is scanned. No dependency beyond CPython and libc.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { F_ITER, F_LAYER, F_RANK, F_EXP, F_ACT, F_BUD, NFIELDS };
#define ALL_FIELDS ((1u << NFIELDS) - 1)
#define EMPTY ((int64_t)-1)          /* hash-table hole: parsed values are never negative */

static unsigned char SPACE[256];      /* ASCII white space as str.split() sees it */

/* ---- growable arrays ---------------------------------------------------------------- */

typedef struct { int64_t *v; size_t n, cap; } vec_t;

static int vec_push(vec_t *a, int64_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        int64_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* ---- hash tables of non-negative int64 keys (open addressing, load <= 1/2) ----------- */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

typedef struct { int64_t *k, *v; size_t n, cap; int values; } table_t;  /* set or map */

static int table_init(table_t *t, size_t cap, int values) {
    t->n = 0, t->cap = cap, t->values = values;
    t->k = malloc(cap * sizeof(int64_t));
    t->v = values ? malloc(cap * sizeof(int64_t)) : NULL;
    if (!t->k || (values && !t->v)) return -1;
    memset(t->k, 0xff, cap * sizeof(int64_t));
    return 0;
}

static void table_free(table_t *t) { free(t->k); free(t->v); t->k = t->v = NULL; }

/* The slot of key (found, or the hole where it goes). */
static size_t table_slot(const table_t *t, int64_t key) {
    size_t i = mix((uint64_t)key) & (t->cap - 1);
    while (t->k[i] != EMPTY && t->k[i] != key) i = (i + 1) & (t->cap - 1);
    return i;
}

static int table_grow(table_t *t) {
    table_t bigger;
    if (table_init(&bigger, t->cap * 2, t->values)) { table_free(&bigger); return -1; }
    for (size_t i = 0; i < t->cap; i++) {
        if (t->k[i] == EMPTY) continue;
        size_t j = table_slot(&bigger, t->k[i]);
        bigger.k[j] = t->k[i];
        if (t->values) bigger.v[j] = t->v[i];
    }
    bigger.n = t->n;
    table_free(t);
    *t = bigger;
    return 0;
}

/* Insert key; *slot gets its slot. Returns 1 if new, 0 if present, -1 out of memory. */
static int table_add(table_t *t, int64_t key, size_t *slot) {
    if (2 * (t->n + 1) > t->cap && table_grow(t)) return -1;
    size_t i = table_slot(t, key);
    *slot = i;
    if (t->k[i] == key) return 0;
    t->k[i] = key;
    t->n++;
    return 1;
}

/* Set of (iter, layer, rank) triples too large to pack in 64 bits. */
typedef struct { int64_t *k; size_t n, cap; } wide_t;

static int wide_init(wide_t *w, size_t cap) {
    w->n = 0, w->cap = cap;
    w->k = malloc(3 * cap * sizeof(int64_t));
    if (!w->k) return -1;
    memset(w->k, 0xff, 3 * cap * sizeof(int64_t));
    return 0;
}

static size_t wide_slot(const wide_t *w, const int64_t *key) {
    uint64_t h = mix((uint64_t)key[0] ^ mix((uint64_t)key[1] ^ mix((uint64_t)key[2])));
    size_t i = h & (w->cap - 1);
    while (w->k[3 * i] != EMPTY && memcmp(w->k + 3 * i, key, 3 * sizeof(int64_t)))
        i = (i + 1) & (w->cap - 1);
    return i;
}

static int wide_add(wide_t *w, const int64_t *key) {
    if (2 * (w->n + 1) > w->cap) {
        wide_t bigger;
        if (wide_init(&bigger, w->cap * 2)) { free(bigger.k); return -1; }
        for (size_t i = 0; i < w->cap; i++)
            if (w->k[3 * i] != EMPTY)
                memcpy(bigger.k + 3 * wide_slot(&bigger, w->k + 3 * i), w->k + 3 * i,
                       3 * sizeof(int64_t));
        bigger.n = w->n;
        free(w->k);
        *w = bigger;
    }
    size_t i = wide_slot(w, key);
    if (w->k[3 * i] == EMPTY) { memcpy(w->k + 3 * i, key, 3 * sizeof(int64_t)); w->n++; }
    return 0;
}

/* ---- distinct packed keys: appended, then radix-sorted and deduplicated --------------- */

#define COMPACT_KEYS 4000000     /* appended keys between deduplications, at least */

typedef struct { int64_t *v; size_t n, cap, unique; } keys_t;  /* v[:unique] sorted, distinct */

/* Sort v[0:n) (non-negative) by 8-bit digits, skipping digits every key shares. */
static int radix_sort(int64_t *v, size_t n) {
    size_t count[8][256] = {{0}};
    int64_t *tmp = malloc((n ? n : 1) * sizeof *tmp), *src = v, *dst = tmp;
    if (!tmp) return -1;
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < 8; d++) count[d][(uint64_t)v[i] >> (8 * d) & 0xFF]++;
    for (int d = 0; d < 8; d++) {
        size_t sum = 0, *c = count[d];
        if (n == 0 || c[(uint64_t)v[0] >> (8 * d) & 0xFF] == n) continue;
        for (int j = 0; j < 256; j++) { size_t x = c[j]; c[j] = sum; sum += x; }
        for (size_t i = 0; i < n; i++) dst[c[(uint64_t)src[i] >> (8 * d) & 0xFF]++] = src[i];
        int64_t *swap = src; src = dst; dst = swap;
    }
    if (src != v) memcpy(v, src, n * sizeof *v);
    free(tmp);
    return 0;
}

/* Sort and deduplicate all keys (skips the sort when they arrived in order). */
static int keys_compact(keys_t *k) {
    size_t i, out = 0;
    for (i = 1; i < k->n && k->v[i - 1] <= k->v[i]; i++) {}
    if (i < k->n && radix_sort(k->v, k->n)) return -1;
    for (i = 0; i < k->n; i++)
        if (out == 0 || k->v[out - 1] != k->v[i]) k->v[out++] = k->v[i];
    k->n = k->unique = out;
    return 0;
}

static int keys_add(keys_t *k, int64_t key) {
    if (k->n == k->cap) {
        if (k->n > 2 * k->unique + COMPACT_KEYS) {
            if (keys_compact(k)) return -1;
        } else {
            size_t cap = k->cap ? 2 * k->cap : 1 << 16;
            int64_t *v = realloc(k->v, cap * sizeof *v);
            if (!v) return -1;
            k->v = v, k->cap = cap;
        }
        if (k->n == k->cap) return keys_add(k, key);
    }
    k->v[k->n++] = key;
    return 0;
}

/* ---- per (iteration, layer) group sums --------------------------------------------- */

/* One group's sums (values clipped at SUM_CLIP before summing; unsigned: an overflow wraps
 * as numpy's int64 sums of the pure path do, read back as int64). */
typedef struct { int64_t key; uint64_t rows, act, exp, sat; } group_t;
typedef struct { group_t *v; size_t n, cap, merged, runs; int dirty; } groups_t;  /* dirty: v[]
            not strictly increasing by key (merge due); runs: GROUP_RUNS, or a test's value */

#define SUM_CLIP ((int64_t)1 << 40)
#define GROUP_RUNS (1u << 20)     /* appended runs between merges, at least */

static int group_cmp(const void *a, const void *b) {
    int64_t x = ((const group_t *)a)->key, y = ((const group_t *)b)->key;
    return (x > y) - (x < y);
}

/* Sort the runs by key and add up the runs of one key: v[] then strictly increasing. */
static void group_compact(groups_t *g) {
    size_t out = 0;
    if (g->dirty) qsort(g->v, g->n, sizeof *g->v, group_cmp);
    for (size_t i = 0; i < g->n; i++) {
        if (out && g->v[out - 1].key == g->v[i].key) {
            group_t *o = &g->v[out - 1], *r = &g->v[i];
            o->rows += r->rows, o->act += r->act, o->exp += r->exp, o->sat += r->sat;
        } else {
            g->v[out++] = g->v[i];
        }
    }
    g->n = g->merged = out, g->dirty = 0;
}

/* A new run for key (the previous run holds another key). */
static int group_run(groups_t *g, int64_t key) {
    if (g->n == g->cap) {
        if (g->dirty && g->n > 2 * g->merged + g->runs) group_compact(g);
        if (g->n == g->cap) {
            size_t cap = g->cap ? 2 * g->cap : 1024;
            group_t *v = realloc(g->v, cap * sizeof *v);
            if (!v) return -1;
            g->v = v, g->cap = cap;
        }
    }
    if (g->n && key <= g->v[g->n - 1].key) g->dirty = 1;
    group_t fresh = {key, 0, 0, 0, 0};
    g->v[g->n++] = fresh;
    return 0;
}

/* ---- the fold (what telemetry._Accumulator computes from rows) ----------------------- */

typedef struct {
    int64_t warmup, rows, saturated, used, saturated_used;
    keys_t keys;        /* packed iter << 32 | layer << 16 | rank */
    wide_t wide;        /* the others */
    table_t budgets;    /* distinct budgets */
    table_t peaks;      /* expected_recv -> max actual_valid_recv over used rows */
    int64_t last_budget, last_exp;
    size_t last_peak;   /* slot of last_exp in peaks */
    /* per (iter, layer) group, iter < 2^31 and layer < 2^16 (as the pure path): runs of
     * consecutive rows with one key iter << 16 | layer, appended in the hot loop (no hashing,
     * no Python object); sorted and merged into one entry per key only when they arrive out
     * of order, or pile up (group_compact) */
    groups_t groups;
    group_t *cur;       /* the run of last_group (set whenever a run starts) */
    int64_t last_group, over_budget;
} fold_t;

static int group_row(fold_t *f, const int64_t *r, int sat) {
    int64_t key = r[F_ITER] << 16 | r[F_LAYER];
    if (key != f->last_group) {
        if (group_run(&f->groups, key)) return -1;
        f->last_group = key, f->cur = &f->groups.v[f->groups.n - 1];
    }
    group_t *g = f->cur;
    g->rows += 1;
    g->act += (uint64_t)(r[F_ACT] < SUM_CLIP ? r[F_ACT] : SUM_CLIP);
    g->exp += (uint64_t)(r[F_EXP] < SUM_CLIP ? r[F_EXP] : SUM_CLIP);
    g->sat += (uint64_t)sat;
    return 0;
}

static int fold_init(fold_t *f, int64_t warmup) {
    memset(f, 0, sizeof *f);
    f->warmup = warmup, f->last_budget = f->last_exp = f->last_group = EMPTY;
    if (wide_init(&f->wide, 16)
        || table_init(&f->budgets, 16, 0) || table_init(&f->peaks, 16, 1))
        return -1;
    return 0;
}

static void fold_free(fold_t *f) {
    free(f->keys.v); f->keys.v = NULL; free(f->wide.k); f->wide.k = NULL;
    table_free(&f->budgets); table_free(&f->peaks);
    free(f->groups.v); f->groups.v = NULL;
}

static int fold_row(fold_t *f, const int64_t *r) {
    size_t slot;
    int sat = r[F_ACT] >= r[F_BUD], used = r[F_ITER] >= f->warmup;
    f->rows++, f->saturated += sat, f->used += used, f->saturated_used += sat & used;
    f->over_budget += r[F_ACT] > r[F_BUD];
    if (r[F_BUD] != f->last_budget) {
        if (table_add(&f->budgets, r[F_BUD], &slot) < 0) return -1;
        f->last_budget = r[F_BUD];
    }
    if (used) {
        if (r[F_EXP] != f->last_exp) {
            int fresh = table_add(&f->peaks, r[F_EXP], &slot);
            if (fresh < 0) return -1;
            if (fresh) f->peaks.v[slot] = r[F_ACT];
            f->last_exp = r[F_EXP], f->last_peak = slot;
        }
        if (r[F_ACT] > f->peaks.v[f->last_peak]) f->peaks.v[f->last_peak] = r[F_ACT];
    }
    if (r[F_ITER] < (1LL << 31) && r[F_LAYER] < (1 << 16) && r[F_RANK] < (1 << 16))
        return group_row(f, r, sat)
            || keys_add(&f->keys, r[F_ITER] << 32 | r[F_LAYER] << 16 | r[F_RANK]);
    return wide_add(&f->wide, r);
}

/* ---- parsing one block --------------------------------------------------------------- */

typedef struct { char kind; int64_t line, start, end, index; } deferred_t;

typedef struct {
    fold_t *fold;                 /* fold rows here, or (NULL) collect them: */
    vec_t rows, lines, ranks;
    deferred_t *deferred;
    size_t n_deferred, cap_deferred;
    int64_t n_rows, setup_rows, newlines;
    int oom;
} sink_t;

static int defer(sink_t *s, char kind, int64_t line, int64_t start, int64_t end) {
    if (s->n_deferred == s->cap_deferred) {
        size_t cap = s->cap_deferred ? 2 * s->cap_deferred : 64;
        deferred_t *d = realloc(s->deferred, cap * sizeof *d);
        if (!d) return -1;
        s->deferred = d, s->cap_deferred = cap;
    }
    deferred_t e = {kind, line, start, end, s->n_rows};
    s->deferred[s->n_deferred++] = e;
    return 0;
}

static int field_of(const char *k, Py_ssize_t n) {
    switch (n) {     /* the first byte first: most tokens of a row's tail are no field */
    case 4: return k[0] == 'i' && !memcmp(k, "iter", 4) ? F_ITER
                 : k[0] == 'r' && !memcmp(k, "rank", 4) ? F_RANK : -1;
    case 5: return k[0] == 'l' && !memcmp(k, "layer", 5) ? F_LAYER : -1;
    case 6: return k[0] == 'b' && !memcmp(k, "budget", 6) ? F_BUD : -1;
    case 13: return k[0] == 'e' && !memcmp(k, "expected_recv", 13) ? F_EXP : -1;
    case 17: return k[0] == 'a' && !memcmp(k, "actual_valid_recv", 17) ? F_ACT : -1;
    default: return -1;
    }
}

/* 1-18 ASCII digits (telemetry._INT). */
static int parse_int(const char *p, Py_ssize_t n, int64_t *out) {
    int64_t x = 0;
    if (n < 1 || n > 18) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)p[i] - '0';
        if (d > 9) return 0;
        x = 10 * x + d;
    }
    *out = x;
    return 1;
}

/* Fields of a row. Returns -1 on a non-ASCII byte (str.split() would see Unicode white
 * space) or a wanted key given twice (telemetry.lines.row_fields: the row is malformed; Python
 * judges it), else the mask of keys whose value parsed. */
static int parse_fields(const char *s, const char *e, int only_rank, int64_t *vals,
                        unsigned *seen) {
    unsigned ok = 0;
    *seen = 0;
    while (s < e) {
        while (s < e && SPACE[(unsigned char)*s]) s++;
        const char *token = s, *eq = NULL;
        for (; s < e && !SPACE[(unsigned char)*s]; s++) {
            if ((unsigned char)*s >= 0x80) return -1;
            if (*s == '=' && !eq) eq = s;
        }
        if (!eq) continue;
        int f = field_of(token, eq - token);
        if (f < 0 || (only_rank && f != F_RANK)) continue;
        if (*seen >> f & 1) return -1;
        *seen |= 1u << f;
        ok |= (unsigned)parse_int(eq + 1, s - eq - 1, &vals[f]) << f;
    }
    return (int)ok;
}

typedef struct {
    const char *tag[2]; Py_ssize_t len[2]; int is_setup[2];
    Py_ssize_t lcp, pivot;    /* common prefix of the tags; the byte memchr looks for */
} tags_t;

/* Earliest match of either tag at or after pos (regex alternation order: tag[0] first);
 * *which gets its index. Returns n when none. cache[] holds each tag's next occurrence. */
static Py_ssize_t next_hit(const char *b, Py_ssize_t n, Py_ssize_t pos, const tags_t *t,
                           Py_ssize_t *cache, int *which) {
    if (t->lcp > 0) {
        const char key = t->tag[0][t->pivot];
        while (pos + t->pivot < n) {
            const char *p = memchr(b + pos + t->pivot, key, n - pos - t->pivot);
            if (!p) return n;
            pos = p - b - t->pivot;
            /* the byte after the tags' common prefix rules one out without a memcmp */
            for (int i = 0; i < 2; i++)
                if (n - pos >= t->len[i]
                    && (t->len[i] <= t->lcp || b[pos + t->lcp] == t->tag[i][t->lcp])
                    && !memcmp(b + pos, t->tag[i], t->len[i])) {
                    *which = i;
                    return pos;
                }
            pos++;
        }
        return n;
    }
    for (int i = 0; i < 2; i++) {
        if (cache[i] < pos) {
            const char *p = memmem(b + pos, n - pos, t->tag[i], t->len[i]);
            cache[i] = p ? p - b : n;
        }
    }
    *which = cache[1] < cache[0];
    return cache[*which];
}

/* Whether [p, e) holds a token whose key (its text before its first '=') is one of the six
 * fields (a repeat). Only the '=' bytes are visited (memchr), the text before each read
 * backwards to white space: no loop over every byte of a row's tail. That text holds a '='
 * when this is not its token's first one, and a key has no '=': field_of refuses it, as it
 * refuses the 18 bytes a walk stopped at (no key is longer than 17). *p is white space
 * (canonical() checks it first), so a walk never passes p. */
static int has_field(const char *p, const char *e) {
    for (const char *q = p; q < e && (q = memchr(q, '=', (size_t)(e - q))) != NULL; q++) {
        /* the six keys end in r, k, v or t: any other byte before '=' ends no key */
        if (q == p || (q[-1] != 'r' && q[-1] != 'k' && q[-1] != 'v' && q[-1] != 't')) continue;
        const char *k = q;
        while (k > p && q - k <= 17 && !SPACE[(unsigned char)k[-1]]) k--;
        if (field_of(k, q - k) >= 0) return 1;
    }
    return 0;
}

/* The usual row: " iter=I layer=L rank=R expected_recv=E actual_valid_recv=A budget=B"
 * then white space or the end, and no field repeated after it. */
static int canonical(const char *p, const char *e, int64_t *v) {
/* the literal key (a constant: the compiler compares it inline, no memcmp call per key),
 * then 1-18 digits; unsigned: a long run of digits wraps, then is refused */
#define KEY_VALUE(key, field)                                                     \
    do {                                                                          \
        if (e - p < (Py_ssize_t)sizeof(key) - 1 || memcmp(p, key, sizeof(key) - 1)) \
            return 0;                                                             \
        p += sizeof(key) - 1;                                                     \
        const char *d = p;                                                        \
        uint64_t x = 0;                                                           \
        while (p < e && (unsigned)(*p - '0') <= 9) x = 10 * x + (uint64_t)(*p++ - '0'); \
        if (p == d || p - d > 18) return 0;                                       \
        v[field] = (int64_t)x;                                                    \
    } while (0)
    KEY_VALUE(" iter=", F_ITER);
    KEY_VALUE(" layer=", F_LAYER);
    KEY_VALUE(" rank=", F_RANK);
    KEY_VALUE(" expected_recv=", F_EXP);
    KEY_VALUE(" actual_valid_recv=", F_ACT);
    KEY_VALUE(" budget=", F_BUD);
#undef KEY_VALUE
    return (p == e || SPACE[(unsigned char)*p]) && v[F_EXP] != 0 && !has_field(p, e);
}

static int64_t count_newlines(const char *p, const char *e) {
    int64_t c = 0;
    for (; p < e; p++) c += *p == '\n';
    return c;
}

/* Parse block b[0:n) (whole lines) whose first line is first_line into the sink. */
static void scan_block(const char *b, Py_ssize_t n, int64_t first_line, const tags_t *t,
                       sink_t *s) {
    Py_ssize_t cache[2] = {-1, -1}, counted = 0;
    int64_t line = first_line;
    int which, next_which = 0;
    Py_ssize_t hit = next_hit(b, n, 0, t, cache, &which);
    while (hit < n && !s->oom) {
        line += count_newlines(b + counted, b + hit);
        Py_ssize_t start = hit + t->len[which];
        const char *nl = memchr(b + start, '\n', n - start);
        Py_ssize_t end = nl ? nl - b : n;
        Py_ssize_t next = next_hit(b, n, start, t, cache, &next_which);
        if (next < end) end = next;
        int64_t vals[NFIELDS];
        unsigned seen;
        if (t->is_setup[which]) {
            s->setup_rows++;
            int ok = parse_fields(b + start, b + end, 1, vals, &seen);
            if (ok < 0) s->oom |= defer(s, 's', line, start, end);
            else if (ok & (1u << F_RANK)) s->oom |= vec_push(&s->ranks, vals[F_RANK]);
        } else {
            int ok = canonical(b + start, b + end, vals)
                ? (int)ALL_FIELDS : parse_fields(b + start, b + end, 0, vals, &seen);
            if (ok == (int)ALL_FIELDS && vals[F_EXP] != 0) {
                if (s->fold) {
                    s->oom |= fold_row(s->fold, vals);
                } else {
                    for (int i = 0; i < NFIELDS; i++) s->oom |= vec_push(&s->rows, vals[i]);
                    s->oom |= vec_push(&s->lines, line);
                }
                s->n_rows++;
            } else {
                s->oom |= defer(s, 'd', line, start, end);
            }
        }
        counted = end, hit = next, which = next_which;   /* [hit, end) holds no newline */
    }
    s->newlines = line - first_line + count_newlines(b + counted, b + n);
}

/* ---- sifting a block's lines for the taxonomy (harness.taxonomy.judge) ------------------
 *
 * The taxonomy reads every line that is not a canonical dispatch-row line (judge.row_line:
 * launcher prefixes, the tag, the six fields in order, then only numeric key=value tokens)
 * and, among those, needs the full line only when it may hold a signature or a row: it holds
 * an ESC byte (colour may hide text), either tag, or one of the signatures' literal anchors
 * (harness.taxonomy.prefilter; "folded" anchors compare ASCII-case-insensitively). */

static int is_dig(char c) { return (unsigned)(c - '0') <= 9; }
/* ASCII classes (a bytes regex's), never the C locale's */
static int word_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int word(char c) { return word_start(c) || is_dig(c); }

/* `\d{lo,hi}` followed by a non-digit or the end (greedy; shorter never helps there). */
/* digits_between, their value in *v (only ever asked of at most 18 digits) */
static const char *digits_value(const char *p, const char *e, Py_ssize_t lo, Py_ssize_t hi,
                                int64_t *v) {
    const char *d = p;
    int64_t x = 0;
    while (p < e && is_dig(*p)) x = 10 * x + (*p++ - '0');
    *v = x;
    return (p - d >= lo && p - d <= hi) ? p : NULL;
}

static const char *digits_between(const char *p, const char *e, Py_ssize_t lo, Py_ssize_t hi) {
    const char *d = p;
    while (p < e && is_dig(*p)) p++;
    return (p - d >= lo && p - d <= hi) ? p : NULL;
}

static const char *literal(const char *p, const char *e, const char *s, Py_ssize_t n) {
    return (e - p >= n && !memcmp(p, s, (size_t)n)) ? p + n : NULL;
}

/* Whether a token at q starts with one of the six keys and '=' (judge.row_line's (?!dup)). */
static int dup_key(const char *q, const char *e) {
#define IS(key) (e - q >= (Py_ssize_t)sizeof(key) - 1 && !memcmp(q, key, sizeof(key) - 1))
    switch (*q) {
    case 'i': return IS("iter=");
    case 'l': return IS("layer=");
    case 'r': return IS("rank=");
    case 'e': return IS("expected_recv=");
    case 'a': return IS("actual_valid_recv=");
    case 'b': return IS("budget=");
    default: return 0;
    }
#undef IS
}

/* The six fields and the tail of judge.row_line from p (just after the tag): the end of the
 * line (its newline, or e) when they match up to it (the six values in v), else NULL. No
 * part of the rule matches
 * a newline, so e may be the end of the block: a canonical line is read once. */
static const char *canonical_rest(const char *p, const char *e, int64_t *v) {
/* the literal key (a constant: the compiler compares it inline), then 1-18 digits */
#define KEY_DIGITS(key, field)                                                    \
    if (e - p < (Py_ssize_t)sizeof(key) - 1 || memcmp(p, key, sizeof(key) - 1))   \
        return NULL;                                                              \
    p += sizeof(key) - 1;                                                         \
    if (!(p = digits_value(p, e, 1, 18, &v[field]))) return NULL;
    KEY_DIGITS(" iter=", F_ITER)
    KEY_DIGITS(" layer=", F_LAYER)
    KEY_DIGITS(" rank=", F_RANK)
    if (e - p < 16 || memcmp(p, " expected_recv=", 15) || p[15] < '1' || p[15] > '9')
        return NULL;
    p += 15;
    if (!(p = digits_value(p, e, 1, 18, &v[F_EXP]))) return NULL;   /* [1-9]\d{0,17} */
    KEY_DIGITS(" actual_valid_recv=", F_ACT)
    KEY_DIGITS(" budget=", F_BUD)
#undef KEY_DIGITS
    /* (?: (?!dup)[A-Za-z_]\w*=-?\d+(?:\.\d+)?)* then [ \t]*\r?$ */
    while (p + 1 < e && *p == ' ' && word_start(p[1])) {
        const char *q = p + 1;
        if (dup_key(q, e)) return NULL;
        while (q < e && word(*q)) q++;
        if (q >= e || *q != '=') return NULL;
        q++;
        if (q < e && *q == '-') q++;
        if (!(q = digits_between(q, e, 1, PY_SSIZE_T_MAX))) return NULL;
        if (q + 1 < e && *q == '.' && is_dig(q[1]))
            q = digits_between(q + 1, e, 1, PY_SSIZE_T_MAX);
        p = q;
    }
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    if (p < e && *p == '\r') p++;
    return (p == e || *p == '\n') ? p : NULL;
}

/* The tag, then canonical_rest. */
static const char *canonical_from(const char *p, const char *e, const char *tag,
                                  Py_ssize_t n, int64_t *v) {
    return (p = literal(p, e, tag, n)) != NULL ? canonical_rest(p, e, v) : NULL;
}

/* judge.row_line on the line starting at s (e: the end of the block): the end of the line
 * when it is a canonical dispatch-row line, else NULL. The rule is
 * ^(?:\d+: )?(?:\[(?:rank|default)\d+\]: ?)?TAG..., every choice of the optional prefixes
 * tried (a custom tag may start like a prefix). */
static const char *canonical_line(const char *s, const char *e, const char *tag,
                                  Py_ssize_t n, int64_t *v) {
    const char *starts[2] = {s, NULL}, *q = s, *end;
    while (q < e && is_dig(*q)) q++;
    if (q > s && e - q >= 2 && q[0] == ':' && q[1] == ' ') starts[1] = q + 2;
    for (int i = 0; i < 2; i++) {
        const char *p = starts[i], *r;
        if (!p) continue;
        if ((end = canonical_from(p, e, tag, n, v))) return end;
        if (!(r = literal(p, e, "[rank", 5)) && !(r = literal(p, e, "[default", 8))) continue;
        if (!(r = digits_between(r, e, 1, PY_SSIZE_T_MAX)) || !(r = literal(r, e, "]:", 2)))
            continue;
        if (r < e && *r == ' ' && (end = canonical_from(r + 1, e, tag, n, v))) return end;
        if ((end = canonical_from(r, e, tag, n, v))) return end;
    }
    return NULL;
}

typedef struct {
    const char **text; Py_ssize_t *len; int *folded; Py_ssize_t n;
    unsigned *key;                    /* per anchor: its first two bytes, ASCII lower-cased */
    Py_ssize_t *order;                /* anchors of two bytes or more, sorted by key */
    Py_ssize_t n_order;
    unsigned char one[256];           /* an anchor of one byte is this byte */
    unsigned char two[65536 / 8];     /* bit: some anchor's key is these two bytes lowered */
} anchors_t;

static unsigned char lower(unsigned char c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }
static unsigned char upper(unsigned char c) { return (c >= 'a' && c <= 'z') ? c - 32 : c; }
static unsigned key_of(const char *p) {
    return (unsigned)lower((unsigned char)p[0]) << 8 | lower((unsigned char)p[1]);
}

static const anchors_t *sorting;      /* qsort's context (the GIL is held while indexing) */
static int by_key(const void *x, const void *y) {
    unsigned a = sorting->key[*(const Py_ssize_t *)x], b = sorting->key[*(const Py_ssize_t *)y];
    return (a > b) - (a < b);
}

static void anchors_index(anchors_t *a) {
    memset(a->one, 0, sizeof a->one);
    memset(a->two, 0, sizeof a->two);
    a->n_order = 0;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        const unsigned char *t = (const unsigned char *)a->text[i];
        if (a->len[i] == 1) {
            a->one[t[0]] = 1;
            if (a->folded[i]) a->one[lower(t[0])] = a->one[upper(t[0])] = 1;
            continue;
        }
        a->key[i] = key_of(a->text[i]);
        a->two[a->key[i] >> 3] |= (unsigned char)(1u << (a->key[i] & 7));
        a->order[a->n_order++] = i;
    }
    sorting = a;
    qsort(a->order, (size_t)a->n_order, sizeof *a->order, by_key);
    sorting = NULL;
}

static int anchor_here(const anchors_t *a, Py_ssize_t i, const char *p, const char *e) {
    Py_ssize_t n = a->len[i];
    if (e - p < n) return 0;
    if (!a->folded[i]) return !memcmp(p, a->text[i], (size_t)n);
    for (Py_ssize_t k = 0; k < n; k++)
        if (lower((unsigned char)p[k]) != (unsigned char)a->text[i][k]) return 0;
    return 1;
}

/* Whether an anchor starts at p (bucketed by the lowered first two bytes). */
static int anchor_at(const anchors_t *a, const char *p, const char *e) {
    if (a->one[(unsigned char)*p])
        for (Py_ssize_t i = 0; i < a->n; i++)
            if (a->len[i] == 1 && anchor_here(a, i, p, e)) return 1;
    if (e - p < 2) return 0;
    unsigned k = key_of(p);
    if (!(a->two[k >> 3] >> (k & 7) & 1)) return 0;
    Py_ssize_t lo = 0, hi = a->n_order;           /* first anchor whose key >= k */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a->key[a->order[mid]] < k) lo = mid + 1; else hi = mid;
    }
    for (; lo < a->n_order && a->key[a->order[lo]] == k; lo++)
        if (anchor_here(a, a->order[lo], p, e)) return 1;
    return 0;
}

/* Whether the line b[s:e) holds one of the anchors. */
static int has_anchor(const anchors_t *a, const char *s, const char *e) {
    for (const char *p = s; p < e; p++)
        if (anchor_at(a, p, e)) return 1;
    return 0;
}

static int contains(const char *s, const char *e, const char *t, Py_ssize_t n) {
    return e - s >= n && memmem(s, (size_t)(e - s), t, (size_t)n) != NULL;
}

/* ---- Python glue ----------------------------------------------------------------------- */

static int get_tags(Py_buffer *d, Py_buffer *u, tags_t *t) {
    if (d->len == 0 || u->len == 0 || memchr(d->buf, '\n', d->len)
        || memchr(u->buf, '\n', u->len)) {
        PyErr_SetString(PyExc_ValueError, "tags must be non-empty, without a newline");
        return -1;
    }
    /* sorted((dispatch, setup), reverse=True): a tag's extension before the tag itself */
    Py_ssize_t m = d->len < u->len ? d->len : u->len;
    int c = memcmp(d->buf, u->buf, m);
    int setup_first = c < 0 || (c == 0 && u->len >= d->len);
    Py_buffer *first = setup_first ? u : d, *second = setup_first ? d : u;
    t->tag[0] = first->buf, t->len[0] = first->len;
    t->tag[1] = second->buf, t->len[1] = second->len;
    /* hit.group() == setup decides the kind (equal tags: setup) */
    for (int i = 0; i < 2; i++)
        t->is_setup[i] = t->len[i] == u->len && !memcmp(t->tag[i], u->buf, u->len);
    Py_ssize_t k = 0, shortest = t->len[0] < t->len[1] ? t->len[0] : t->len[1];
    while (k < shortest && t->tag[0][k] == t->tag[1][k]) k++;
    t->lcp = k, t->pivot = 0;
    while (t->pivot + 1 < k && strchr("[ ", t->tag[0][t->pivot])) t->pivot++;
    return 0;
}

/* Scan buf[0:length) with the GIL released; then the deferred list and setup ranks. */
static PyObject *run_scan(PyObject *args, fold_t *fold, sink_t *s) {
    Py_buffer buf, d, u;
    Py_ssize_t length;
    long long first_line;
    tags_t t;
    PyObject *out = NULL, *deferred = NULL, *ranks = NULL;
    memset(s, 0, sizeof *s);
    s->fold = fold;
    if (!PyArg_ParseTuple(args, "y*nLy*y*", &buf, &length, &first_line, &d, &u)) return NULL;
    if (length < 0 || length > buf.len) {
        PyErr_SetString(PyExc_ValueError, "length outside the buffer");
        goto done;
    }
    if (get_tags(&d, &u, &t)) goto done;
    Py_BEGIN_ALLOW_THREADS
    scan_block(buf.buf, length, first_line, &t, s);
    Py_END_ALLOW_THREADS
    if (s->oom) { PyErr_NoMemory(); goto done; }
    deferred = PyList_New((Py_ssize_t)s->n_deferred);
    ranks = PyList_New((Py_ssize_t)s->ranks.n);
    if (!deferred || !ranks) goto done;
    for (size_t i = 0; i < s->n_deferred; i++) {
        deferred_t *e = &s->deferred[i];
        PyObject *item = Py_BuildValue("(CLLLL)", e->kind, (long long)e->line,
                                       (long long)e->start, (long long)e->end,
                                       (long long)e->index);
        if (!item) goto done;
        PyList_SET_ITEM(deferred, i, item);
    }
    for (size_t i = 0; i < s->ranks.n; i++) {
        PyObject *r = PyLong_FromLongLong(s->ranks.v[i]);
        if (!r) goto done;
        PyList_SET_ITEM(ranks, i, r);
    }
    out = Py_BuildValue("(LOLO)", (long long)s->newlines, deferred, (long long)s->setup_rows,
                        ranks);
done:
    Py_XDECREF(deferred);
    Py_XDECREF(ranks);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&d);
    PyBuffer_Release(&u);
    free(s->deferred);
    free(s->ranks.v);
    return out;
}

/* Anchors from a tuple of bytes; folded: compare ASCII-case-insensitively (given lower). */
static int anchors_add(anchors_t *a, PyObject *seq, int folded, Py_ssize_t at) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) == 0) {
            PyErr_SetString(PyExc_TypeError, "anchors must be non-empty bytes");
            return -1;
        }
        a->text[at + i] = PyBytes_AS_STRING(item);
        a->len[at + i] = PyBytes_GET_SIZE(item);
        a->folded[at + i] = folded;
    }
    return 0;
}

PyDoc_STRVAR(sift_doc,
"sift(buf, length, dispatch_tag, setup_tag, exact, folded) -> (candidates, others, lines)\n\n"
"The lines of buf[:length] (whole lines) that are not canonical dispatch-row lines\n"
"(harness.taxonomy.judge.row_line), as int64 bytes, 3 per line: 0-based line index in the\n"
"block, start, end (without the newline). candidates: the lines holding an ESC byte, a tag\n"
"or an anchor (exact: tuple of bytes; folded: tuple of lower-case bytes compared\n"
"ASCII-case-insensitively); others: the rest. exact=None: every such line is a candidate.\n"
"lines: the number of lines.");

static void anchors_free(anchors_t *a) {
    if (a) { free(a->text); free(a->len); free(a->folded); free(a->key); free(a->order); }
    free(a);
}

/* The anchors of (exact, folded) tuples of bytes; exact None: *a = NULL (every line a
 * candidate). -1 with an exception set on bad arguments or no memory. */
static int anchors_new(PyObject *exact, PyObject *folded, anchors_t **out) {
    anchors_t *a;
    *out = NULL;
    if (exact == Py_None) return 0;
    if (!PyTuple_Check(exact) || !PyTuple_Check(folded)) {
        PyErr_SetString(PyExc_TypeError, "anchors must be tuples of bytes (or exact=None)");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(exact) + PyTuple_GET_SIZE(folded);
    size_t m = (size_t)(n ? n : 1);
    a = calloc(1, sizeof *a);
    if (a) {
        a->n = n;
        a->text = calloc(m, sizeof *a->text), a->len = calloc(m, sizeof *a->len);
        a->folded = calloc(m, sizeof *a->folded), a->key = calloc(m, sizeof *a->key);
        a->order = calloc(m, sizeof *a->order);
    }
    if (!a || !a->text || !a->len || !a->folded || !a->key || !a->order) {
        anchors_free(a);
        PyErr_NoMemory();
        return -1;
    }
    if (anchors_add(a, exact, 0, 0) || anchors_add(a, folded, 1, PyTuple_GET_SIZE(exact))) {
        anchors_free(a);
        return -1;
    }
    anchors_index(a);
    *out = a;
    return 0;
}

/* Sift the block b[0:length) (whole lines) into spans[1] (candidates) and spans[0] (the other
 * non-canonical lines); with a sink, also fold it: a canonical line's six values straight
 * into the sink's fold (what scan_block would fold for it), any other line through
 * scan_block (rows, deferred rows, setup rows). Returns the number of lines. */
static int64_t sift_block(const char *b, Py_ssize_t length, int64_t first_line,
                          const Py_buffer *d, const Py_buffer *u, const anchors_t *a,
                          vec_t spans[2], sink_t *sink, const tags_t *t, int *oom) {
    const char *end = b + length, *s = b;
    int64_t index = 0, v[NFIELDS];
    while (s < end && !*oom) {
        const char *e = canonical_line(s, end, d->buf, d->len, v);
        if (e && sink) {
            sink->oom |= fold_row(sink->fold, v);
            sink->n_rows++;
        } else if (!e) {
            const char *nl = memchr(s, '\n', (size_t)(end - s));
            e = nl ? nl : end;
            int kind = a == NULL || memchr(s, 0x1b, (size_t)(e - s)) != NULL
                || contains(s, e, d->buf, d->len) || contains(s, e, u->buf, u->len)
                || has_anchor(a, s, e);
            *oom |= vec_push(&spans[kind], index) | vec_push(&spans[kind], s - b)
                | vec_push(&spans[kind], e - b);
            if (sink) {
                size_t before = sink->n_deferred;
                scan_block(s, (nl ? e + 1 : e) - s, first_line + index, t, sink);
                for (size_t i = before; i < sink->n_deferred; i++)
                    sink->deferred[i].start += s - b, sink->deferred[i].end += s - b;
            }
        }
        if (sink) *oom |= sink->oom;
        index++;
        s = e < end ? e + 1 : end;
    }
    return index;
}

/* (candidates, others) as int64 bytes; y# of NULL is None, so an empty list is b"". */
static PyObject *spans_out(vec_t spans[2]) {
    return Py_BuildValue("(y#y#)", spans[1].v ? (const char *)spans[1].v : "",
                         (Py_ssize_t)(spans[1].n * sizeof(int64_t)),
                         spans[0].v ? (const char *)spans[0].v : "",
                         (Py_ssize_t)(spans[0].n * sizeof(int64_t)));
}

static PyObject *py_sift(PyObject *self, PyObject *args) {
    Py_buffer buf, d, u;
    Py_ssize_t length;
    PyObject *exact, *folded, *out = NULL, *both = NULL;
    anchors_t *a = NULL;
    vec_t spans[2] = {{0}, {0}};
    int oom = 0;
    int64_t lines = 0;
    if (!PyArg_ParseTuple(args, "y*ny*y*OO", &buf, &length, &d, &u, &exact, &folded))
        return NULL;
    if (length < 0 || length > buf.len || d.len == 0 || u.len == 0
        || memchr(d.buf, '\n', (size_t)d.len) || memchr(u.buf, '\n', (size_t)u.len)) {
        PyErr_SetString(PyExc_ValueError,
                        "length outside the buffer, or a tag empty or holding a newline");
        goto done;
    }
    if (anchors_new(exact, folded, &a)) goto done;
    Py_BEGIN_ALLOW_THREADS
    lines = sift_block(buf.buf, length, 0, &d, &u, a, spans, NULL, NULL, &oom);
    Py_END_ALLOW_THREADS
    if (oom) { PyErr_NoMemory(); goto done; }
    if ((both = spans_out(spans)))
        out = Py_BuildValue("(OOL)", PyTuple_GET_ITEM(both, 0), PyTuple_GET_ITEM(both, 1),
                            (long long)lines);
done:
    Py_XDECREF(both);
    anchors_free(a);
    free(spans[0].v);
    free(spans[1].v);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&d);
    PyBuffer_Release(&u);
    return out;
}

PyDoc_STRVAR(scan_doc,
"scan(buf, length, first_line, dispatch_tag, setup_tag)\n"
"-> (rows, line_nos, newlines, deferred, setup_rows, setup_ranks)\n\n"
"Parse buf[:length] (whole lines). rows: int64 bytes, 6 per row (iter, layer, rank,\n"
"expected_recv, actual_valid_recv, budget); line_nos: int64 bytes, one per row;\n"
"deferred: (kind 'd'|'s', line, start, end, row index) rows for Python to judge.");

static PyObject *py_scan(PyObject *self, PyObject *args) {
    sink_t s;
    PyObject *head = run_scan(args, NULL, &s), *out = NULL;
    if (head) {
        PyObject *rows = PyBytes_FromStringAndSize((char *)s.rows.v,
                                                   s.rows.n * sizeof(int64_t));
        PyObject *lines = PyBytes_FromStringAndSize((char *)s.lines.v,
                                                    s.lines.n * sizeof(int64_t));
        if (rows && lines)
            out = Py_BuildValue("(OOOOOO)", rows, lines, PyTuple_GET_ITEM(head, 0),
                                PyTuple_GET_ITEM(head, 1), PyTuple_GET_ITEM(head, 2),
                                PyTuple_GET_ITEM(head, 3));
        Py_XDECREF(rows);
        Py_XDECREF(lines);
        Py_DECREF(head);
    }
    free(s.rows.v);
    free(s.lines.v);
    return out;
}

typedef struct { PyObject_HEAD fold_t fold; int ready; } FolderObject;

static int Folder_init(FolderObject *self, PyObject *args, PyObject *kw) {
    long long warmup = 0;
    Py_ssize_t group_runs = GROUP_RUNS;
    static char *names[] = {"warmup", "group_runs", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Ln", names, &warmup, &group_runs)) return -1;
    if (group_runs < 0) {
        PyErr_SetString(PyExc_ValueError, "group_runs must be >= 0");
        return -1;
    }
    if (self->ready) fold_free(&self->fold);
    self->ready = 0;
    if (fold_init(&self->fold, warmup)) { fold_free(&self->fold); PyErr_NoMemory(); return -1; }
    self->fold.groups.runs = (size_t)group_runs;
    self->ready = 1;
    return 0;
}

static void Folder_dealloc(FolderObject *self) {
    if (self->ready) fold_free(&self->fold);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ready(FolderObject *self) {
    if (!self->ready) PyErr_SetString(PyExc_RuntimeError, "Folder not initialised");
    return self->ready;
}

static PyObject *Folder_feed(FolderObject *self, PyObject *args) {
    sink_t s;
    if (!ready(self)) return NULL;
    return run_scan(args, &self->fold, &s);
}

/* Folder.feed and sift in one pass (the default tags only: a canonical row line then holds
 * no other tag, so its row is exactly what scan_block would fold). */
static PyObject *Folder_sift_feed(FolderObject *self, PyObject *args) {
    Py_buffer buf, d, u;
    Py_ssize_t length;
    long long first_line;
    PyObject *exact, *folded, *out = NULL, *deferred = NULL, *ranks = NULL, *both = NULL;
    anchors_t *a = NULL;
    vec_t spans[2] = {{0}, {0}};
    sink_t s;
    tags_t t;
    int oom = 0;
    int64_t lines = 0;
    if (!ready(self)) return NULL;
    memset(&s, 0, sizeof s);
    s.fold = &self->fold;
    if (!PyArg_ParseTuple(args, "y*nLy*y*OO", &buf, &length, &first_line, &d, &u, &exact,
                          &folded))
        return NULL;
    if (length < 0 || length > buf.len) {
        PyErr_SetString(PyExc_ValueError, "length outside the buffer");
        goto done;
    }
    if (get_tags(&d, &u, &t) || anchors_new(exact, folded, &a)) goto done;
    Py_BEGIN_ALLOW_THREADS
    lines = sift_block(buf.buf, length, first_line, &d, &u, a, spans, &s, &t, &oom);
    Py_END_ALLOW_THREADS
    if (oom || s.oom) { PyErr_NoMemory(); goto done; }
    deferred = PyList_New((Py_ssize_t)s.n_deferred);
    ranks = PyList_New((Py_ssize_t)s.ranks.n);
    if (!deferred || !ranks) goto done;
    for (size_t i = 0; i < s.n_deferred; i++) {
        deferred_t *e = &s.deferred[i];
        PyObject *item = Py_BuildValue("(CLLLL)", e->kind, (long long)e->line,
                                       (long long)e->start, (long long)e->end,
                                       (long long)e->index);
        if (!item) goto done;
        PyList_SET_ITEM(deferred, i, item);
    }
    for (size_t i = 0; i < s.ranks.n; i++) {
        PyObject *r = PyLong_FromLongLong(s.ranks.v[i]);
        if (!r) goto done;
        PyList_SET_ITEM(ranks, i, r);
    }
    if ((both = spans_out(spans)))
        out = Py_BuildValue("(LOLOOO)", (long long)lines, deferred, (long long)s.setup_rows,
                            ranks, PyTuple_GET_ITEM(both, 0), PyTuple_GET_ITEM(both, 1));
done:
    Py_XDECREF(both);
    Py_XDECREF(deferred);
    Py_XDECREF(ranks);
    anchors_free(a);
    free(spans[0].v);
    free(spans[1].v);
    free(s.deferred);
    free(s.ranks.v);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&d);
    PyBuffer_Release(&u);
    return out;
}

static PyObject *Folder_add_row(FolderObject *self, PyObject *args) {
    long long v[NFIELDS];
    int64_t r[NFIELDS];
    if (!ready(self)) return NULL;
    if (!PyArg_ParseTuple(args, "LLLLLL", v, v + 1, v + 2, v + 3, v + 4, v + 5)) return NULL;
    for (int i = 0; i < NFIELDS; i++) {
        if (v[i] < 0) { PyErr_SetString(PyExc_ValueError, "negative value"); return NULL; }
        r[i] = v[i];
    }
    if (fold_row(&self->fold, r)) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *Folder_counts(FolderObject *self, PyObject *unused) {
    fold_t *f = &self->fold;
    if (!ready(self)) return NULL;
    return Py_BuildValue("(LLLL)", (long long)f->rows, (long long)f->saturated,
                         (long long)f->used, (long long)f->saturated_used);
}

static PyObject *Folder_budgets(FolderObject *self, PyObject *unused) {
    if (!ready(self)) return NULL;
    PyObject *out = PyList_New(0);
    table_t *t = &self->fold.budgets;
    for (size_t i = 0; out && i < t->cap; i++) {
        if (t->k[i] == EMPTY) continue;
        PyObject *x = PyLong_FromLongLong(t->k[i]);
        if (!x || PyList_Append(out, x)) { Py_XDECREF(x); Py_CLEAR(out); break; }
        Py_DECREF(x);
    }
    return out;
}

static PyObject *Folder_peaks(FolderObject *self, PyObject *unused) {
    if (!ready(self)) return NULL;
    PyObject *out = PyDict_New();
    table_t *t = &self->fold.peaks;
    for (size_t i = 0; out && i < t->cap; i++) {
        if (t->k[i] == EMPTY) continue;
        PyObject *k = PyLong_FromLongLong(t->k[i]), *v = PyLong_FromLongLong(t->v[i]);
        if (!k || !v || PyDict_SetItem(out, k, v)) Py_CLEAR(out);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return out;
}

/* One group as the pure path's tuple (key, rows, sum act, sum exp, saturated). */
static PyObject *group_tuple(const group_t *g) {
    return Py_BuildValue("(LLLLL)", (long long)g->key, (long long)g->rows, (long long)g->act,
                         (long long)g->exp, (long long)g->sat);
}

static PyObject *Folder_groups(FolderObject *self, PyObject *unused) {
    groups_t *g = &self->fold.groups;
    if (!ready(self)) return NULL;
    group_compact(g);
    self->fold.last_group = EMPTY;          /* the last run may have moved */
    PyObject *list = PyList_New((Py_ssize_t)g->n);
    for (size_t i = 0; list && i < g->n; i++) {
        PyObject *item = group_tuple(&g->v[i]);
        if (!item) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    if (!list) return NULL;
    return Py_BuildValue("(LN)", (long long)self->fold.over_budget, list);
}

/* A non-negative __int128 as a Python int. */
static PyObject *long_from_u128(unsigned __int128 x) {
    if (x <= (unsigned __int128)INT64_MAX) return PyLong_FromLongLong((long long)x);
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(x >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)x);
    PyObject *sixty_four = PyLong_FromLong(64), *shifted = NULL, *out = NULL;
    if (hi && lo && sixty_four && (shifted = PyNumber_Lshift(hi, sixty_four)))
        out = PyNumber_Add(shifted, lo);
    Py_XDECREF(hi); Py_XDECREF(lo); Py_XDECREF(sixty_four); Py_XDECREF(shifted);
    return out;
}

/* _Accumulator._invariants over the groups, in C: no Python object per group. */
static PyObject *Folder_invariants(FolderObject *self, PyObject *args) {
    long long ranks;
    Py_ssize_t max_issues;
    groups_t *g = &self->fold.groups;
    if (!ready(self)) return NULL;
    if (!PyArg_ParseTuple(args, "Ln", &ranks, &max_issues)) return NULL;
    group_compact(g);
    self->fold.last_group = EMPTY;
    unsigned __int128 dropped = 0;
    long long partial = 0, unconserved = 0;
    PyObject *flagged = PyList_New(0);
    for (size_t i = 0; flagged && i < g->n; i++) {
        /* the values as Python sees them: int64 */
        int64_t n = (int64_t)g->v[i].rows, a = (int64_t)g->v[i].act, e = (int64_t)g->v[i].exp;
        int64_t nsat = (int64_t)g->v[i].sat;
        if ((__int128)e > (__int128)a) dropped += (unsigned __int128)((__int128)e - a);
        int flag = 0;
        if (n != ranks) partial++, flag = 1;
        else if (a > e || (a != e && !nsat)) unconserved++, flag = 1;
        if (flag && PyList_GET_SIZE(flagged) < max_issues) {
            PyObject *item = group_tuple(&g->v[i]);
            if (!item || PyList_Append(flagged, item)) Py_CLEAR(flagged);
            Py_XDECREF(item);
        }
    }
    if (!flagged) return NULL;
    PyObject *drop = long_from_u128(dropped);
    if (!drop) { Py_DECREF(flagged); return NULL; }
    return Py_BuildValue("(LnNLLN)", (long long)self->fold.over_budget, (Py_ssize_t)g->n, drop,
                         partial, unconserved, flagged);
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorted list of a set's keys. */
static PyObject *sorted_list(const table_t *t) {
    int64_t *v = malloc((t->n ? t->n : 1) * sizeof *v);
    size_t n = 0;
    if (!v) return PyErr_NoMemory();
    for (size_t i = 0; i < t->cap; i++)
        if (t->k[i] != EMPTY) v[n++] = t->k[i];
    qsort(v, n, sizeof *v, cmp64);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, x);
    }
    free(v);
    return out;
}

static PyObject *Folder_seen(FolderObject *self, PyObject *unused) {
    fold_t *f = &self->fold;
    table_t col[3];
    size_t slot;
    PyObject *lists[3] = {NULL, NULL, NULL}, *out = NULL;
    int bad = 0;
    if (!ready(self)) return NULL;
    for (int c = 0; c < 3; c++) bad |= table_init(&col[c], 16, 0);
    int64_t last[3] = {EMPTY, EMPTY, EMPTY};
    /* layers and ranks of packed keys are < 2^16: a bit per value says it is in the table
     * already (a rank changes at nearly every key: no hash lookup for each) */
    uint64_t *had = calloc(2 * 1024, sizeof *had);
    if (!had || keys_compact(&f->keys)) bad = 1;
    for (size_t i = 0; !bad && i < f->keys.n; i++) {
        int64_t k = f->keys.v[i], col_of[3] = {k >> 32, k >> 16 & 0xFFFF, k & 0xFFFF};
        if (col_of[0] != last[0]) {
            bad |= table_add(&col[0], col_of[0], &slot) < 0;
            last[0] = col_of[0];
        }
        for (int c = 1; c < 3; c++) {
            uint64_t *word = &had[(c - 1) * 1024 + (col_of[c] >> 6)], bit = 1ULL << (col_of[c] & 63);
            if (!(*word & bit)) {
                *word |= bit;
                bad |= table_add(&col[c], col_of[c], &slot) < 0;
            }
        }
    }
    free(had);
    for (size_t i = 0; !bad && i < f->wide.cap; i++) {
        if (f->wide.k[3 * i] == EMPTY) continue;
        for (int c = 0; c < 3; c++) bad |= table_add(&col[c], f->wide.k[3 * i + c], &slot) < 0;
    }
    if (bad) PyErr_NoMemory();
    for (int c = 0; !bad && c < 3; c++) bad |= !(lists[c] = sorted_list(&col[c]));
    if (!bad)
        out = Py_BuildValue("(n[OOO])", (Py_ssize_t)(f->keys.n + f->wide.n), lists[0],
                            lists[1], lists[2]);
    for (int c = 0; c < 3; c++) { table_free(&col[c]); Py_XDECREF(lists[c]); }
    return out;
}

static PyMethodDef Folder_methods[] = {
    {"feed", (PyCFunction)Folder_feed, METH_VARARGS,
     "feed(buf, length, first_line, dispatch_tag, setup_tag) -> (newlines, deferred, "
     "setup_rows, setup_ranks): fold the block's well-formed rows in."},
    {"sift_feed", (PyCFunction)Folder_sift_feed, METH_VARARGS,
     "sift_feed(buf, length, first_line, dispatch_tag, setup_tag, exact, folded) -> "
     "(newlines, deferred, setup_rows, setup_ranks, candidates, others): feed and sift in "
     "one pass (default tags only)."},
    {"add_row", (PyCFunction)Folder_add_row, METH_VARARGS,
     "add_row(iter, layer, rank, expected_recv, actual_valid_recv, budget): fold one row."},
    {"counts", (PyCFunction)Folder_counts, METH_NOARGS,
     "(rows, saturated_rows, used_rows, saturated_used_rows)"},
    {"budgets", (PyCFunction)Folder_budgets, METH_NOARGS, "distinct budgets (unordered)"},
    {"peaks", (PyCFunction)Folder_peaks, METH_NOARGS,
     "{expected_recv: peak actual_valid_recv over used rows}"},
    {"groups", (PyCFunction)Folder_groups, METH_NOARGS,
     "(rows over budget, [(iter << 16 | layer, rows, sum actual_valid_recv, sum "
     "expected_recv, saturated rows)] per group with iter < 2^31, layer < 2^16, by key)"},
    {"invariants", (PyCFunction)Folder_invariants, METH_VARARGS,
     "invariants(ranks, max_issues) -> (rows over budget, groups, dropped slots, partial "
     "groups, unconserved groups, the first max_issues flagged groups by key as groups() "
     "gives them): _Accumulator._invariants without a Python object per group."},
    {"seen", (PyCFunction)Folder_seen, METH_NOARGS,
     "(distinct (iter, layer, rank) keys, [sorted iters, layers, ranks])"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FolderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "harness.telemetry._scan.Folder",
    .tp_basicsize = sizeof(FolderObject),
    .tp_dealloc = (destructor)Folder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Folder(warmup=0, group_runs=2**20): counts, peaks and distinct keys of dispatch "
              "rows; group_runs: out-of-order group runs appended between merges (tests "
              "lower it to reach the merge).",
    .tp_methods = Folder_methods,
    .tp_init = (initproc)Folder_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {"sift", py_sift, METH_VARARGS, sift_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "harness.telemetry._scan",
    "Compiled scanner for harness.telemetry.summary (optional; the pure path is the reference).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    const char *space = "\t\n\v\f\r\x1c\x1d\x1e\x1f ";
    for (const char *p = space; *p; p++) SPACE[(unsigned char)*p] = 1;
    if (PyType_Ready(&FolderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&FolderType);
    if (PyModule_AddObject(m, "Folder", (PyObject *)&FolderType) < 0) {
        Py_DECREF(&FolderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
